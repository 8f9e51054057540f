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

async function connect(token = TOKEN, fetch = undefined) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {}
  const t = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${daemon.port}/mcp`),
    { requestInit: { headers }, fetch })
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

// A fetch that loses the connection of a tools/call's SSE stream right
// after its first progress event (the run goes on in the daemon), and
// records the Last-Event-ID of each GET the SDK sends to resume.
function losingFetch(resumes) {
  return async (url, init) => {
    const res = await fetch(url, init)
    const headers = new Headers(init?.headers)
    if (init?.method === 'GET') {
      if (headers.get('last-event-id')) resumes.push(headers.get('last-event-id'))
      return res
    }
    const isCall = init?.method === 'POST' && String(init.body).includes('"tools/call"')
    if (!isCall || res.headers.get('content-type') !== 'text/event-stream') return res
    const reader = res.body.getReader()
    const decoder = new TextDecoder()
    let seen = ''
    let lose = false
    const body = new ReadableStream({
      async pull(controller) {
        if (lose) {
          await reader.cancel()
          controller.error(new TypeError('connection lost'))
          return
        }
        const { value, done } = await reader.read()
        if (done) return controller.close()
        seen += decoder.decode(value, { stream: true })
        controller.enqueue(value)
        lose = seen.includes('notifications/progress')
      },
    })
    return new Response(body, { status: res.status, headers: res.headers })
  }
}

test('a call whose stream is lost resumes with Last-Event-ID and gets its result', { timeout: 90000 }, async () => {
  const resumes = []
  const lossy = await connect(TOKEN, losingFetch(resumes))
  try {
    const seen = []
    const code = 'import time\nfor i in range(6):\n    print(f"tick {i}", flush=True)\n    time.sleep(0.5)'
    const result = await lossy.client.callTool({ name: 'run_code', arguments: { code } }, undefined, {
      onprogress: (p) => seen.push(p),
    })
    assert.equal(result.isError, false)
    const ticks = [0, 1, 2, 3, 4, 5].map((i) => `tick ${i}\n`).join('')
    assert.equal(result.structuredContent.logs.stdout, ticks)
    // progress before the loss and after the resume, none twice, none lost
    assert.ok(resumes.length >= 1, 'the SDK resumed by GET')
    assert.match(resumes[0], /^[0-9]+-[0-9]+$/)
    assert.equal(seen.map((p) => p.message).join(''), ticks)
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress)
  } finally {
    await lossy.client.close()
  }
})
