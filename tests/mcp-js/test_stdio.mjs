// The Model Context Protocol's TypeScript SDK as a client of `kernelbridge
// mcp` over stdio, as an MCP client (Claude Desktop, VS Code...) starts it:
// the service in-process on a fresh state dir of its own, and relayed to a
// running daemon (--url, --token-file). The same scenarios as over
// Streamable HTTP (scenarios.mjs). Run: node --test --test-force-exit
// tests/mcp-js/test_stdio.mjs (KB_BINARY=/path/to/kernelbridge).
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'

import { startDaemon } from '../js/daemon.mjs'
import { scenarios } from './scenarios.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const binary = process.env.KB_BINARY || resolve(here, '../../build/kernelbridge')
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('KB_')))

async function connect(args) {
  const transport = new StdioClientTransport({ command: binary, args, env, stderr: 'pipe' })
  const stderr = []
  transport.stderr.on('data', (chunk) => stderr.push(chunk.toString()))
  const client = new Client({ name: 'kernelbridge-stdio-test', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport, stderr }
}

describe('in-process (kernelbridge mcp)', () => {
  let c
  before(async () => { c = await connect(['mcp']) })
  after(async () => { if (c) await c.client.close() })

  test('initialize: our server, the newest revision', () => {
    assert.equal(c.client.getServerVersion().name, 'kernelbridge')
    assert.equal(c.transport.pid > 0, true)
  })

  scenarios(() => c.client)

  test('stdout carries messages alone; the process ends when stdin closes', async () => {
    const pid = c.transport.pid
    const stderr = c.stderr
    await c.client.close()
    c = null
    // builds with -DKB_SANITIZE=ON report memory errors and leaks on stderr
    assert.ok(!/Sanitizer|runtime error:/.test(stderr.join('')), stderr.join(''))
    // gone: its kernels shut down and its fresh state dir removed
    await new Promise((r) => setTimeout(r, 200))
    assert.throws(() => process.kill(pid, 0))
  })
})

describe('relayed to a daemon (kernelbridge mcp --url)', () => {
  const TOKEN = 'relay-token'
  let daemon, c
  before(async () => {
    daemon = await startDaemon({ prefix: 'kbmcprelay-', token: TOKEN, args: (dir) => ['--state-dir', `${dir}/state`] })
    c = await connect(['mcp', '--url', `http://127.0.0.1:${daemon.port}`, '--token-file', `${daemon.dir}/token`])
  })
  after(async () => {
    try {
      if (c) await c.client.close()
      await new Promise((r) => setTimeout(r, 300))
      assert.ok(!/Sanitizer|runtime error:/.test(c.stderr.join('')), c.stderr.join(''))
    } finally {
      if (daemon) await daemon.stop()
    }
  })

  scenarios(() => c.client)

  test('the daemon served it: its request log shows /mcp', () => {
    assert.match(daemon.log(), /POST \/mcp 200/)
  })
})
