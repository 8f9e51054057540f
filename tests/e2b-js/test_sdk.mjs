// E2B's JavaScript SDK (@e2b/code-interpreter, from npm) driving kernelbridge:
// the real daemon binary with --e2b-listen on a loopback ephemeral port, the
// SDK in debug mode (E2B_DEBUG=true: no cloud) pointed at it by
// E2B_SANDBOX_URL. Run: node --test --test-force-exit tests/e2b-js/test_sdk.mjs
// (force-exit: the SDK leaves request timers behind that would hold the
// process for a minute after the last test)
// (KB_BINARY=/path/to/kernelbridge to pick the binary).
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, test } from 'node:test'

import { startDaemon } from '../js/daemon.mjs'

let daemon, Sandbox, sandbox

before(async () => {
  daemon = await startDaemon({
    prefix: 'kbjs-',
    args: (dir) => ['--e2b-listen', '127.0.0.1:0', '--e2b-port-file', join(dir, 'e2b-port'),
      '--state-dir', join(dir, 'state')],
    portFile: 'e2b-port',
  })
  process.env.E2B_DEBUG = 'true'
  process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${daemon.port}`
  ;({ Sandbox } = await import('@e2b/code-interpreter'))
  sandbox = await Sandbox.create()
})

after(async () => {
  if (daemon) await daemon.stop()
})

test('Sandbox.create() in debug mode', () => {
  assert.equal(sandbox.sandboxId, 'debug_sandbox_id')
})

test('runCode with callbacks: stdout, stderr, results, state kept', { timeout: 60000 }, async () => {
  const seen = { stdout: [], stderr: [], results: [] }
  const execution = await sandbox.runCode(
    'import sys\nx = 41\nprint("out")\nprint("err", file=sys.stderr)\n"bar"',
    {
      onStdout: (m) => seen.stdout.push(m.line),
      onStderr: (m) => seen.stderr.push(m.line),
      onResult: (r) => seen.results.push(r.text),
    },
  )
  assert.deepEqual(seen.stdout, ['out\n'])
  assert.deepEqual(seen.stderr, ['err\n'])
  assert.deepEqual(seen.results, ['bar'])
  assert.deepEqual(execution.logs.stdout, ['out\n'])
  assert.equal(execution.text, 'bar')
  assert.equal(execution.error, undefined)
  assert.ok(execution.executionCount >= 1)
  const next = await sandbox.runCode('x + 1')
  assert.equal(next.text, '42')
})

test('errors', { timeout: 60000 }, async () => {
  const errors = []
  const execution = await sandbox.runCode('1/0', { onError: (e) => errors.push(e.name) })
  assert.equal(execution.error.name, 'ZeroDivisionError')
  assert.equal(execution.error.value, 'division by zero')
  assert.match(execution.error.traceback, /ZeroDivisionError/)
  assert.deepEqual(errors, ['ZeroDivisionError'])
})

test('env vars for one execution', { timeout: 60000 }, async () => {
  const code = 'import os; os.environ.get("KBJS_VAR", "unset")'
  assert.equal((await sandbox.runCode(code, { envs: { KBJS_VAR: 'set' } })).text, 'set')
  assert.equal((await sandbox.runCode(code)).text, 'unset')
})

// E2B's own "env vars per execution (bash)", plus a hostile value, the
// streams, state and an exit status, on the bash kernel setup.sh installs.
test('bash: env vars per execution, streams, state, exit status', { timeout: 60000 }, async () => {
  const result = await sandbox.runCode('echo $FOO', { envs: { FOO: 'bar' }, language: 'bash' })
  const resultEmpty = await sandbox.runCode('echo ${FOO:-default}', { language: 'bash' })
  assert.equal(result.logs.stdout[0], 'bar\n')
  assert.equal(resultEmpty.logs.stdout[0], 'default\n')
  const hostile = "it's $HOME `id` \"q\"\nline two"
  const echoed = await sandbox.runCode('printf "%s" "$KBJS_HOSTILE"',
    { envs: { KBJS_HOSTILE: hostile }, language: 'bash' })
  assert.equal(echoed.logs.stdout.join(''), hostile)
  const streams = await sandbox.runCode('kept=41; echo out; echo err >&2', { language: 'bash' })
  assert.deepEqual(streams.logs.stdout, ['out\n'])
  assert.deepEqual(streams.logs.stderr, ['err\n'])
  assert.equal(streams.results.length, 0)
  const failed = await sandbox.runCode('echo $((kept + 1)); false', { language: 'bash' })
  assert.deepEqual(failed.logs.stdout, ['42\n'])
  assert.equal(failed.error.name, 'ExitCode')
  assert.equal(failed.error.value, '1')
})

test('contexts: create, run, list, restart, remove', { timeout: 90000 }, async () => {
  const cwd = mkdtempSync(join(tmpdir(), 'kbjs-cwd-'))
  try {
    const context = await sandbox.createCodeContext({ language: 'python', cwd })
    assert.equal(context.language, 'python')
    assert.equal(context.cwd, cwd)
    assert.equal((await sandbox.runCode('import os; y = 7; os.getcwd()', { context })).text, cwd)
    assert.equal((await sandbox.runCode('y', { context })).text, '7')
    // The default context does not see the context's state.
    assert.equal((await sandbox.runCode('"y" in globals()')).text, 'False')
    const ids = (await sandbox.listCodeContexts()).map((c) => c.id)
    assert.ok(ids.includes(context.id), ids)
    await sandbox.restartCodeContext(context)
    assert.equal((await sandbox.runCode('y', { context })).error.name, 'NameError')
    await sandbox.removeCodeContext(context.id)
    assert.ok(!(await sandbox.listCodeContexts()).some((c) => c.id === context.id))
    await assert.rejects(sandbox.runCode('1', { context }), (e) => e.name === 'NotFoundError')
  } finally {
    rmSync(cwd, { recursive: true, force: true })
  }
})

test('a matplotlib figure arrives as a PNG result', { timeout: 60000 }, async () => {
  const execution = await sandbox.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()',
  )
  const pngs = execution.results.filter((r) => r.png).map((r) => r.png)
  assert.equal(pngs.length, 1)
  assert.ok(Buffer.from(pngs[0], 'base64').subarray(1, 4).toString() === 'PNG')
  assert.ok(execution.results[0].formats().includes('png'))
})

test('a timeout aborts the request and the execution is interrupted', { timeout: 60000 }, async () => {
  const context = await sandbox.createCodeContext({ language: 'python' })
  const began = Date.now()
  await assert.rejects(
    sandbox.runCode('import time\ntime.sleep(30)\nfinished = True', { context, timeoutMs: 1500 }),
    (e) => e.name === 'TimeoutError',
  )
  assert.ok(Date.now() - began < 10000)
  // The kernel was interrupted: the context answers at once, and the
  // interrupted code never finished.
  const after = Date.now()
  const execution = await sandbox.runCode('"finished" in globals()', { context })
  assert.equal(execution.text, 'False')
  assert.ok(Date.now() - after < 10000)
  await sandbox.removeCodeContext(context)
})
