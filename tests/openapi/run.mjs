// Runs the typed client (client.ts and scenario.ts, compiled by tsc into
// the directory given as the first argument) against the real daemon,
// started with a token on loopback ports by tests/js/daemon.mjs.
//   node tests/openapi/run.mjs OUT_DIR
import { randomBytes } from 'node:crypto'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { startDaemon } from '../js/daemon.mjs'

const out = process.argv[2]
if (!out) throw new Error('usage: node run.mjs DIR_OF_THE_COMPILED_CLIENT')
const { scenario } = await import(pathToFileURL(join(resolve(out), 'scenario.js')).href)
const token = randomBytes(16).toString('hex')
const daemon = await startDaemon({
  prefix: 'kbts-',
  token,
  args: (dir) => ['--state-dir', join(dir, 'state')],
})
let failure
try {
  for (const step of await scenario(`http://127.0.0.1:${daemon.port}`, token)) console.log('ok -', step)
} catch (error) {
  failure = error
}
await daemon.stop()
if (failure) {
  console.error('not ok -', failure)
  process.exit(1)
}
