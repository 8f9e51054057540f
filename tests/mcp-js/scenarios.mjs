// What a user of kernelbridge's MCP server checks, with the official
// TypeScript SDK's Client over any transport: the tools and their
// schemas, a context created and its state kept, a matplotlib PNG as an
// image item, an error as isError, progress during a 3 s loop, a
// cancellation that interrupts time.sleep(30). test_http.mjs and
// test_stdio.mjs run them over Streamable HTTP and stdio.
import assert from 'node:assert/strict'
import { test } from 'node:test'

export const TOOLS = ['run_code', 'create_context', 'list_contexts', 'delete_context',
  'restart_context', 'interrupt_context', 'list_kernelspecs', 'get_process_logs',
  'fork_context', 'checkpoint_context', 'restore_context']

const texts = (result) => result.content.filter((c) => c.type === 'text').map((c) => c.text)

// The scenarios, as node:test tests; client() gives the connected Client.
export function scenarios(client) {
  test('tools/list: every tool, with input and output schemas', async () => {
    const { tools } = await client().listTools()
    const names = tools.map((t) => t.name)
    for (const name of TOOLS) assert.ok(names.includes(name), `${name} in ${names}`)
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, 'object', tool.name)
      assert.equal(tool.outputSchema.type, 'object', tool.name)
      assert.ok(tool.description.length > 20, tool.name)
    }
    const run = tools.find((t) => t.name === 'run_code')
    assert.deepEqual(run.inputSchema.required, ['code'])
    for (const field of ['code', 'language', 'context_id', 'timeout', 'cwd', 'env', 'rollback'])
      assert.ok(field in run.inputSchema.properties, field)
  })

  test('create_context, then run_code keeps its state', { timeout: 90000 }, async () => {
    const created = await client().callTool({ name: 'create_context', arguments: { language: 'python' } })
    assert.equal(created.isError, undefined)
    const id = created.structuredContent.context_id
    assert.match(id, /^ctx_/)
    const first = await client().callTool({ name: 'run_code', arguments: { code: 'x = 41\nprint("set")', context_id: id } })
    assert.equal(first.isError, false)
    assert.deepEqual(texts(first), ['set\n'])
    const second = await client().callTool({ name: 'run_code', arguments: { code: 'x + 1', context_id: id } })
    assert.equal(second.structuredContent.results[0].text, '42')
    assert.equal(second.structuredContent.context.context_id, id)
    assert.deepEqual(texts(second), ['42'])
    const listed = await client().callTool({ name: 'list_contexts', arguments: {} })
    assert.ok(listed.structuredContent.contexts.some((c) => c.context_id === id))
    const deleted = await client().callTool({ name: 'delete_context', arguments: { context_id: id } })
    assert.equal(deleted.structuredContent.done, true)
    const gone = await client().callTool({ name: 'run_code', arguments: { code: 'x', context_id: id } })
    assert.equal(gone.isError, true)
    assert.match(texts(gone)[0], /^SESSION_NOT_FOUND: /)
  })

  test('a matplotlib figure comes back as a PNG image item', { timeout: 90000 }, async () => {
    const code = 'import matplotlib\nmatplotlib.use("module://matplotlib_inline.backend_inline")\n' +
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()'
    const result = await client().callTool({ name: 'run_code', arguments: { code } })
    assert.equal(result.isError, false, JSON.stringify(result.content))
    const images = result.content.filter((c) => c.type === 'image')
    assert.equal(images.length, 1, JSON.stringify(result.content.map((c) => c.type)))
    assert.equal(images[0].mimeType, 'image/png')
    const png = Buffer.from(images[0].data, 'base64')
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.equal(result.structuredContent.results[0].png, images[0].data)
  })

  test('an error is isError with its traceback, ANSI removed', { timeout: 60000 }, async () => {
    const result = await client().callTool({ name: 'run_code', arguments: { code: 'def f():\n    return 1 / 0\nf()' } })
    assert.equal(result.isError, true)
    assert.equal(result.structuredContent.error.name, 'ZeroDivisionError')
    const text = texts(result).join('\n')
    assert.match(text, /ZeroDivisionError: division by zero/)
    assert.ok(!text.includes('\x1b'), text)
  })

  test('progress notifications carry output during a 3 s loop', { timeout: 60000 }, async () => {
    const seen = []
    const code = 'import time\nfor i in range(6):\n    print(f"tick {i}", flush=True)\n    time.sleep(0.5)'
    const started = Date.now()
    const result = await client().callTool({ name: 'run_code', arguments: { code } }, undefined, {
      onprogress: (p) => seen.push({ at: Date.now() - started, ...p }),
    })
    assert.equal(result.isError, false)
    assert.ok(seen.length >= 3, JSON.stringify(seen))
    assert.ok(seen[0].at < 2000, `first progress after ${seen[0].at} ms`)
    assert.equal(seen.map((p) => p.message).join(''), [0, 1, 2, 3, 4, 5].map((i) => `tick ${i}\n`).join(''))
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress)
  })

  test('a cancelled call interrupts time.sleep(30)', { timeout: 60000 }, async () => {
    const created = await client().callTool({ name: 'create_context', arguments: {} })
    const id = created.structuredContent.context_id
    const controller = new AbortController()
    const started = Date.now()
    const call = client().callTool({ name: 'run_code', arguments: { code: 'import time\ntime.sleep(30)', context_id: id } },
      undefined, { signal: controller.signal })
    setTimeout(() => controller.abort('enough'), 1500)
    await assert.rejects(call)
    // the run was interrupted: the context answers now, not after 30 s
    const next = await client().callTool({ name: 'run_code', arguments: { code: 'print("after")', context_id: id } })
    assert.deepEqual(texts(next), ['after\n'])
    assert.ok(Date.now() - started < 15000, `took ${Date.now() - started} ms`)
    await client().callTool({ name: 'delete_context', arguments: { context_id: id } })
  })

  test('bad arguments are -32602 naming the field', async () => {
    await assert.rejects(client().callTool({ name: 'run_code', arguments: { code: 1 } }),
      (e) => e.code === -32602 && /code/.test(e.message))
    await assert.rejects(client().callTool({ name: 'no_such_tool', arguments: {} }),
      (e) => e.code === -32602 && /Unknown tool/.test(e.message))
  })
}
