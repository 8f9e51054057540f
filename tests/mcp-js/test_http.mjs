// The Model Context Protocol's TypeScript SDK (@modelcontextprotocol/sdk,
// pinned in package.json) as a client of kernelbridge's /mcp over
// Streamable HTTP: the real daemon on a loopback ephemeral port with a
// token, the SDK's Client and StreamableHTTPClientTransport sending it as
// Authorization: Bearer. Run: node --test --test-force-exit
// tests/mcp-js/test_http.mjs (KB_BINARY=/path/to/kernelbridge picks the
// binary).
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { startDaemon } from '../js/daemon.mjs'
import { scenarios } from './scenarios.mjs'

const TOKEN = 'mcp-test-token'
let daemon, client, transport

async function connect(token = TOKEN) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {}
  const t = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${daemon.port}/mcp`),
    { requestInit: { headers } })
  const c = new Client({ name: 'kernelbridge-test', version: '1.0.0' })
  await c.connect(t)
  return { client: c, transport: t }
}

before(async () => {
  daemon = await startDaemon({ prefix: 'kbmcp-', token: TOKEN, args: (dir) => ['--state-dir', `${dir}/state`] })
  ;({ client, transport } = await connect())
})

after(async () => {
  try {
    if (client) await client.close()
  } finally {
    if (daemon) await daemon.stop()
  }
})

test('initialize: a session, the newest revision, our server', () => {
  assert.match(transport.sessionId, /^[0-9a-f]{32}$/)
  assert.equal(transport.protocolVersion, '2025-11-25')
  assert.equal(client.getServerVersion().name, 'kernelbridge')
  assert.deepEqual(client.getServerCapabilities().tools, { listChanged: false })
})

scenarios(() => client)

test('without the token: 401, no session', async () => {
  await assert.rejects(connect(null), /401|Unauthorized|token/i)
})

test('a session ended (DELETE) is refused after', async () => {
  const other = await connect()
  const listed = await other.client.listTools()
  assert.ok(listed.tools.length >= 8)
  const id = other.transport.sessionId
  await other.transport.terminateSession()
  // the same id, sent again by hand: 404 as the specification says
  const res = await fetch(`http://127.0.0.1:${daemon.port}/mcp`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': id, 'MCP-Protocol-Version': '2025-11-25' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }),
  })
  assert.equal(res.status, 404)
  const body = await res.json()
  assert.equal(body.error.data.code, 'SESSION_NOT_FOUND')
  await other.client.close()
})
