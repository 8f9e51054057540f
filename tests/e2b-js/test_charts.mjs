// Charts and data through E2B's JavaScript SDK (@e2b/code-interpreter, from
// npm): the real daemon with --e2b-listen, its Python contexts on Debian's
// ipykernel with the project's IPython extension (docs/charts.md), and
// nothing of E2B's sandbox image. A matplotlib figure comes back as
// Result.chart, a pandas DataFrame as Result.data, as E2B's API returns them.
// Run: node --test --test-force-exit tests/e2b-js/test_charts.mjs
// (KB_BINARY=/path/to/kernelbridge to pick the binary).
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, test } from 'node:test'

import { startDaemon } from '../js/daemon.mjs'

let daemon, sandbox

before(async () => {
  daemon = await startDaemon({
    prefix: 'kbjs-charts-',
    args: (dir) => ['--e2b-listen', '127.0.0.1:0', '--e2b-port-file', join(dir, 'e2b-port'),
      '--state-dir', join(dir, 'state')],
    portFile: 'e2b-port',
  })
  process.env.E2B_DEBUG = 'true'
  process.env.E2B_SANDBOX_URL = `http://127.0.0.1:${daemon.port}`
  const { Sandbox } = await import('@e2b/code-interpreter')
  sandbox = await Sandbox.create()
  await sandbox.runCode('import matplotlib\nmatplotlib.use("agg")\nimport matplotlib.pyplot as plt')
})

after(async () => {
  if (daemon) await daemon.stop()
})

/** The one result of code that ends with a figure or a frame. */
async function only(code) {
  const execution = await sandbox.runCode(code)
  assert.equal(execution.error, undefined, JSON.stringify(execution.error))
  assert.equal(execution.results.length, 1, JSON.stringify(execution.results))
  return execution.results[0]
}

test('a line chart: labels, units, scales, ticks and every point', { timeout: 60000 }, async () => {
  const result = await only(`
xs = [i / 10 for i in range(50)]
fig, ax = plt.subplots()
ax.plot(xs, [x * x for x in xs], label='square')
ax.plot(xs, [2 * x for x in xs], '--', label='double')
ax.set_title('Growth'); ax.set_xlabel('Time (s)'); ax.set_ylabel('Size [m]')
ax.legend()
fig`)
  const chart = result.chart
  assert.equal(chart.type, 'line')
  assert.equal(chart.title, 'Growth')
  assert.deepEqual([chart.x_label, chart.x_unit, chart.y_label, chart.y_unit],
    ['Time (s)', 's', 'Size [m]', 'm'])
  assert.deepEqual([chart.x_scale, chart.y_scale], ['linear', 'linear'])
  assert.ok(chart.x_ticks.every((t) => typeof t === 'number'))
  assert.equal(chart.x_tick_labels.length, chart.x_ticks.length)
  assert.deepEqual(chart.elements.map((e) => e.label), ['square', 'double'])
  const square = chart.elements[0].points
  assert.equal(square.length, 50)
  square.forEach(([x, y], i) => {
    assert.ok(Math.abs(x - i / 10) < 1e-9 && Math.abs(y - (i / 10) ** 2) < 1e-9)
  })
  assert.equal(result.data, undefined)
  assert.ok(!Object.keys(result.extra ?? {}).some((k) => k.includes('kernelbridge')))
})

test('dates and a log scale on a scatter chart', { timeout: 60000 }, async () => {
  const chart = (await only(`
import datetime
days = [datetime.datetime(2024, 1, d) for d in (1, 2, 3)]
fig, ax = plt.subplots()
ax.scatter(days, [1, 10, 100], label='visits')
ax.set_yscale('log')
fig`)).chart
  assert.equal(chart.type, 'scatter')
  assert.deepEqual([chart.x_scale, chart.y_scale], ['datetime', 'log'])
  assert.deepEqual(chart.elements[0].points,
    [['2024-01-01T00:00:00', 1], ['2024-01-02T00:00:00', 10], ['2024-01-03T00:00:00', 100]])
  assert.ok(new Date(chart.x_ticks[0]).getTime() > 0)
})

test('bar, pie and box charts', { timeout: 60000 }, async () => {
  const bar = (await only(`
fig, ax = plt.subplots()
ax.bar(['A', 'B', 'C'], [100, 200, 300], label='Books Sold')
ax.set_xlabel('Authors'); ax.set_title('Sales')
fig`)).chart
  assert.equal(bar.type, 'bar')
  assert.deepEqual(bar.elements.map((e) => [e.label, e.group, e.value]),
    [['A', 'Books Sold', 100], ['B', 'Books Sold', 200], ['C', 'Books Sold', 300]])
  const pie = (await only(`
fig, ax = plt.subplots()
ax.pie([1, 3], labels=['cats', 'dogs'])
fig`)).chart
  assert.equal(pie.type, 'pie')
  assert.equal(pie.title, null) // E2B's null where none is set
  assert.deepEqual(pie.elements.map((e) => [e.label, Math.round(e.angle)]), [['cats', 90], ['dogs', 270]])
  const box = (await only(`
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 40]], labels=['first'])
fig`)).chart
  assert.equal(box.type, 'box_and_whisker')
  const [first] = box.elements
  assert.equal(first.label, 'first')
  assert.deepEqual([first.min, first.median, first.max, first.outliers], [1, 3.5, 5, [40]])
})

test('several axes make a superchart', { timeout: 60000 }, async () => {
  const chart = (await only(`
fig, (a, b) = plt.subplots(1, 2)
a.plot([1, 2], [3, 4]); a.set_title('left')
b.bar(['x'], [5]); b.set_title('right')
fig.suptitle('Both')
fig`)).chart
  assert.equal(chart.type, 'superchart')
  assert.equal(chart.title, 'Both')
  assert.deepEqual(chart.elements.map((c) => [c.type, c.title]), [['line', 'left'], ['bar', 'right']])
})

test('an image is no chart, and no error', { timeout: 60000 }, async () => {
  const result = await only('fig, ax = plt.subplots()\nax.imshow([[0, 1], [1, 0]])\nfig')
  assert.equal(result.chart, undefined)
})

test('a DataFrame comes back as data: columns as lists', { timeout: 60000 }, async () => {
  const result = await only(`
import pandas as pd
pd.DataFrame({'a': [1, 2, 3], 'when': pd.to_datetime(['2024-01-01', None, '2024-01-03']),
              'x': [0.5, float('nan'), 2.0]})`)
  assert.deepEqual(result.data, {
    a: [1, 2, 3],
    when: ['2024-01-01T00:00:00', null, '2024-01-03T00:00:00'],
    x: [0.5, null, 2],
  })
  assert.ok(result.html.includes('<table'))
  assert.equal(result.chart, undefined)
  assert.ok(result.formats().includes('data'))
})

test('other values have neither', { timeout: 60000 }, async () => {
  const result = await only('1 + 1')
  assert.equal(result.text, '2')
  assert.equal(result.chart, undefined)
  assert.equal(result.data, undefined)
})
