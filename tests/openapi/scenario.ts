// What the generated types must let a client do against the real daemon:
// create a context, run code keeping state, read a run's process record
// and its logs, get a typed error. Called by run.mjs with the daemon's URL
// and token; throws on the first thing that is not as the document says.
import { ApiError, KernelbridgeClient } from './client.js'
import type { LogsQuery } from './client.js'

function check(condition: boolean, what: string, got?: unknown): asserts condition {
  if (!condition) throw new Error(`${what}${got === undefined ? '' : `: got ${JSON.stringify(got)}`}`)
}

export async function scenario(baseUrl: string, token: string): Promise<string[]> {
  const steps: string[] = []
  const anonymous = new KernelbridgeClient(baseUrl)
  const health = await anonymous.health()
  check(health.status === 'ok' && health.sandbox_id.length > 0, 'health', health)
  steps.push(`health ok (${health.version})`)

  try {
    await anonymous.createContext({ language: 'python' })
    throw new Error('a context was created without the token')
  } catch (error) {
    check(error instanceof ApiError && error.body.code === 'UNAUTHORIZED', 'no token', String(error))
  }

  const client = new KernelbridgeClient(baseUrl, token)
  const context = await client.createContext({ language: 'python', context_id: 'ts-client' })
  check(context.context_id === 'ts-client' && context.state !== 'dead', 'context', context)
  check(context.generation === 1 && typeof context.cwd === 'string', 'context fields', context)
  steps.push(`context ${context.context_id} (${context.kernel_name}, pid ${context.pid ?? 'none'})`)
  try {
    const first = await client.run({ code: 'x = 41', context_id: context.context_id })
    check(first.error === null && first.process.reason === 'exited', 'first run', first)
    const second = await client.run({
      code: 'for i in range(3):\n    print(x + i)\nx + 1',
      context_id: context.context_id,
    })
    check(second.logs.stdout === '41\n42\n43\n', 'state kept between runs', second.logs)
    const main = second.results.find((r) => r.is_main_result)
    check(main?.text === '42', 'main result', second.results)
    check(second.context.generation === 1, 'result context', second.context)
    steps.push(`runs keep state: ${JSON.stringify(second.logs.stdout)}`)

    const processId = second.process.process_id
    const record = await client.getProcess(processId)
    check(record.state === 'terminal' && record.exit_code === 0, 'process record', record)
    const wait = await client.waitProcess(processId, 5)
    check(wait.state === 'terminal' && wait.reason === 'exited', 'wait', wait)
    const query: LogsQuery = { cursor: 0 }
    const logs = await client.processLogs(processId, query)
    const text = logs.frames.filter((f) => f.channel === 'stdout').map((f) => f.data).join('')
    check(text === '41\n42\n43\n' && logs.eof, 'logs', logs)
    const page = await client.processLogs(processId, { cursor: 1, limit: 1 })
    check(page.frames.length <= 1 && (page.frames[0]?.cursor ?? 1) >= 1, 'a page of logs', page)
    steps.push(`logs of ${processId}: ${logs.frames.length} frames, next cursor ${logs.next_cursor}`)

    const failed = await client.run({ code: '1/0', context_id: context.context_id, strip_ansi: true })
    check(failed.error?.name === 'ZeroDivisionError' && failed.process.exit_code === 1, 'error', failed)
    steps.push(`error run: ${failed.error.name}`)

    try {
      await client.run({ code: '1', context_id: 'no-such-context' })
      throw new Error('a run on an unknown context succeeded')
    } catch (error) {
      check(error instanceof ApiError && error.status === 404, 'unknown context', String(error))
      check(error.body.code === 'SESSION_NOT_FOUND', 'error code', error.body)
    }
    steps.push('typed error: SESSION_NOT_FOUND')
  } finally {
    await client.deleteContext(context.context_id)
  }
  try {
    await client.getContext(context.context_id)
    throw new Error('a deleted context is still there')
  } catch (error) {
    check(error instanceof ApiError && error.body.code === 'SESSION_NOT_FOUND', 'deleted', String(error))
  }
  steps.push('context deleted')
  return steps
}
