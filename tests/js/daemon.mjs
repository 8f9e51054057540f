// The real kernelbridge daemon for the Node test suites (tests/e2b-js,
// tests/jupyterlab-js): started on loopback ephemeral ports in a private
// temp dir with the KB_* variables of the environment removed, stopped
// with SIGTERM, which must end it with status 0 and no sanitizer report.
// KB_BINARY=/path/to/kernelbridge picks the binary.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const binary = process.env.KB_BINARY || resolve(here, '../../build/kernelbridge')
const START_TIMEOUT_MS = 30000
const STOP_TIMEOUT_MS = 30000

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Start `kernelbridge serve` with args (each may name a file of the dir
// through dir => ...), a token file when token is given, and wait until
// portFile (in the dir) has a port. Returns { dir, port, log, stop }.
export async function startDaemon({ prefix = 'kbjs-', args = () => [], token, portFile = 'port' } = {}) {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  const log = () => readFileSync(join(dir, 'stderr'), 'utf8')
  const argv = ['serve', '--listen', '127.0.0.1:0', '--port-file', join(dir, 'port'), ...args(dir)]
  if (token !== undefined) {
    writeFileSync(join(dir, 'token'), token + '\n', { mode: 0o600 })
    argv.push('--token-file', join(dir, 'token'))
  }
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('KB_')))
  const daemon = spawn(binary, argv, {
    cwd: dir,
    env,
    stdio: ['ignore', openSync(join(dir, 'stdout'), 'w'), openSync(join(dir, 'stderr'), 'w')],
  })
  const exited = new Promise((r) => daemon.on('exit', (code, signal) => r({ code, signal })))
  const deadline = Date.now() + START_TIMEOUT_MS
  const file = join(dir, portFile)
  while (!existsSync(file) || readFileSync(file, 'utf8').trim() === '') {
    if (daemon.exitCode !== null) throw new Error('daemon exited before listening:\n' + log())
    if (Date.now() > deadline) throw new Error('daemon did not listen in time:\n' + log())
    await sleep(20)
  }
  const port = Number(readFileSync(file, 'utf8').trim())

  async function stop() {
    if (daemon.exitCode === null) daemon.kill('SIGTERM')
    let timer
    const timeout = new Promise((r) => { timer = setTimeout(() => r({ timeout: true }), STOP_TIMEOUT_MS) })
    const how = await Promise.race([exited, timeout])
    clearTimeout(timer)
    if (how.timeout) {
      daemon.kill('SIGKILL')
      throw new Error('daemon did not stop within 30 s of SIGTERM; log in ' + dir)
    }
    assert.equal(how.code, 0, 'daemon exit status; log in ' + dir + ':\n' + log())
    // Builds with -DKB_SANITIZE=ON report memory errors in the log.
    assert.ok(!/Sanitizer|runtime error:/.test(log()), 'sanitizer report; log in ' + dir)
    rmSync(dir, { recursive: true, force: true })
  }

  return { dir, port, log, stop }
}
