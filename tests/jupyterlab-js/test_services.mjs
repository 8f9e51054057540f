// JupyterLab's client library (@jupyterlab/services, from npm) driving
// kernelbridge's Jupyter API (SPEC section 10): the real daemon binary on a
// loopback ephemeral port with a token and a fresh --ephemeral state dir,
// real python3 (ipykernel) kernels, JupyterLab's KernelSpecManager,
// KernelManager, SessionManager and kernel connections over the websocket in
// both framings: v1.kernel.websocket.jupyter.org (what services 7 offers)
// and the legacy JSON one (services falls back to it when the server picks
// no subprotocol; we make it so by handing services a WebSocket class that
// offers none, through ServerConnection's `WebSocket` setting).
// Run: node --test --test-force-exit tests/jupyterlab-js/test_services.mjs
// (KB_BINARY=/path/to/kernelbridge to pick the binary; force-exit: kernel
// connections keep timers after dispose).
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import {
  KernelAPI,
  KernelManager,
  KernelSpecAPI,
  KernelSpecManager,
  ServerConnection,
  SessionAPI,
  SessionManager,
} from '@jupyterlab/services'
import WebSocket from 'ws'

import { sleep, startDaemon } from '../js/daemon.mjs'

const TOKEN = 'kbjl-' + Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2)
const V1 = 'v1.kernel.websocket.jupyter.org'

let daemon, port

// services' own debug lines ("Starting WebSocket: ...") would drown the
// test output.
console.debug = () => {}

// Every websocket services opens, to check which framing was negotiated.
const sockets = []

// services' default WebSocket in Node is ws; this one records its sockets.
class RecordingWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols)
    sockets.push(this)
  }
}

// One that offers no subprotocol: the server must answer in the legacy
// JSON framing (Jupyter Server's default before 2.0), and services, seeing
// protocol '', serializes and deserializes in that framing.
class LegacyWebSocket extends WebSocket {
  constructor(url, _protocols) {
    super(url, [])
    sockets.push(this)
  }
}

function settings({ token = TOKEN, WebSocketClass = RecordingWebSocket } = {}) {
  return ServerConnection.makeSettings({
    baseUrl: `http://127.0.0.1:${port}/`,
    wsUrl: `ws://127.0.0.1:${port}/`,
    token,
    appendToken: true,
    WebSocket: WebSocketClass,
  })
}

function waitFor(what, predicate, timeoutMs = 30000) {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + timeoutMs
    const poll = () => {
      let value
      try {
        value = predicate()
      } catch (e) {
        return reject(e)
      }
      if (value) return resolve(value)
      if (Date.now() > deadline) return reject(new Error('timed out waiting for ' + what))
      setTimeout(poll, 20)
    }
    poll()
  })
}

// Execute code on a kernel connection; iopub messages are collected until
// the reply and the idle status both came (future.done).
async function execute(kernel, code, { onIOPub, onStdin, timeoutMs = 60000 } = {}) {
  const iopub = []
  const future = kernel.requestExecute({ code, stop_on_error: false, allow_stdin: Boolean(onStdin) })
  future.onIOPub = (msg) => {
    iopub.push(msg)
    if (onIOPub) onIOPub(msg, future)
  }
  if (onStdin) future.onStdin = (msg) => onStdin(msg, future)
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`execute of ${JSON.stringify(code)} timed out`)), timeoutMs)
  })
  try {
    const reply = await Promise.race([future.done, timeout])
    return { reply, iopub, future }
  } finally {
    clearTimeout(timer)
  }
}

const ofType = (iopub, type) => iopub.filter((m) => m.header.msg_type === type)
const stdout = (iopub) =>
  ofType(iopub, 'stream').filter((m) => m.content.name === 'stdout').map((m) => m.content.text).join('')
const resultText = (iopub) => ofType(iopub, 'execute_result').map((m) => m.content.data['text/plain'])

before(async () => {
  daemon = await startDaemon({ prefix: 'kbjl-', args: () => ['--ephemeral'], token: TOKEN })
  port = daemon.port
})

after(async () => {
  for (const ws of sockets) ws.terminate()
  if (daemon) await daemon.stop()
})

test('KernelSpecManager lists the specs, python3 among them', { timeout: 30000 }, async () => {
  const manager = new KernelSpecManager({ serverSettings: settings() })
  try {
    await manager.ready
    await manager.refreshSpecs()
    const specs = manager.specs
    assert.ok(specs, 'specs loaded')
    assert.equal(typeof specs.default, 'string')
    assert.ok(specs.default in specs.kernelspecs, `default ${specs.default} is listed`)
    const python = specs.kernelspecs.python3
    assert.ok(python, 'python3 listed: ' + Object.keys(specs.kernelspecs))
    assert.equal(python.name, 'python3')
    assert.equal(python.language, 'python')
    assert.equal(typeof python.display_name, 'string')
    assert.ok(python.display_name.length > 0)
    assert.ok(Array.isArray(python.argv) && python.argv.includes('{connection_file}'), python.argv)
    assert.equal(typeof python.resources, 'object')
    // The REST function, the same through KernelSpecAPI.
    const raw = await KernelSpecAPI.getSpecs(settings())
    assert.deepEqual(Object.keys(raw.kernelspecs).sort(), Object.keys(specs.kernelspecs).sort())
  } finally {
    manager.dispose()
  }
})

test('a wrong token is refused with ServerConnection.ResponseError 401/403', { timeout: 30000 }, async () => {
  const wrong = settings({ token: TOKEN + 'x' })
  for (const call of [() => KernelSpecAPI.getSpecs(wrong), () => KernelAPI.listRunning(wrong),
    () => SessionAPI.listRunning(wrong)]) {
    await assert.rejects(call(), (e) => {
      assert.ok(e instanceof ServerConnection.ResponseError, `${e}`)
      assert.ok([401, 403].includes(e.response.status), `status ${e.response.status}`)
      return true
    })
  }
  // No token at all, likewise.
  await assert.rejects(KernelSpecAPI.getSpecs(settings({ token: '' })),
    (e) => e instanceof ServerConnection.ResponseError && [401, 403].includes(e.response.status))
})

for (const framing of ['v1', 'legacy']) {
  const WebSocketClass = framing === 'v1' ? RecordingWebSocket : LegacyWebSocket
  const expectedProtocol = framing === 'v1' ? V1 : ''

  describe(`kernels over the ${framing} websocket framing`, () => {
    let manager, kernel

    before(async () => {
      manager = new KernelManager({ serverSettings: settings({ WebSocketClass }) })
      await manager.ready
      kernel = await manager.startNew({ name: 'python3' })
      await kernel.info
    })

    after(async () => {
      if (kernel && !kernel.isDisposed) await kernel.shutdown().catch(() => {})
      manager?.dispose()
    })

    test('the connection uses the expected subprotocol', () => {
      assert.equal(kernel.connectionStatus, 'connected')
      const mine = sockets.filter((ws) => ws.url.includes(kernel.id) && ws.readyState === WebSocket.OPEN)
      assert.ok(mine.length >= 1, 'an open socket to the kernel')
      for (const ws of mine) assert.equal(ws.protocol, expectedProtocol)
    })

    test('the kernel is listed with a UUID id and its name', async () => {
      assert.match(kernel.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
      assert.equal(kernel.name, 'python3')
      await manager.refreshRunning()
      const models = [...manager.running()]
      assert.ok(models.some((m) => m.id === kernel.id && m.name === 'python3'), JSON.stringify(models))
      const model = await KernelAPI.getKernelModel(kernel.id, settings())
      assert.equal(model.id, kernel.id)
      // Jupyter Server's kernel model: state, activity, open websockets.
      assert.ok(['idle', 'busy', 'starting'].includes(model.execution_state), model.execution_state)
      assert.ok(!Number.isNaN(Date.parse(model.last_activity)), model.last_activity)
      assert.ok(model.connections >= 1, `connections ${model.connections}`)
    })

    test('kernel info', async () => {
      const info = await kernel.info
      assert.equal(info.status, 'ok')
      assert.equal(info.language_info.name, 'python')
      assert.equal(info.implementation, 'ipython')
    })

    test('execute 1+1: execute_result 2 and an ok reply', { timeout: 60000 }, async () => {
      const { reply, iopub } = await execute(kernel, '1+1')
      assert.equal(reply.header.msg_type, 'execute_reply')
      assert.equal(reply.content.status, 'ok')
      assert.deepEqual(resultText(iopub), ['2'])
      const statuses = ofType(iopub, 'status').map((m) => m.content.execution_state)
      assert.deepEqual(statuses, ['busy', 'idle'])
      assert.equal(ofType(iopub, 'execute_input')[0].content.code, '1+1')
      // Every iopub message is a child of the request.
      for (const m of iopub) assert.equal(m.parent_header.msg_id, reply.parent_header.msg_id)
    })

    test('print gives a stdout stream', { timeout: 60000 }, async () => {
      const { reply, iopub } = await execute(kernel, 'for i in range(3): print("line", i)')
      assert.equal(reply.content.status, 'ok')
      assert.equal(stdout(iopub), 'line 0\nline 1\nline 2\n')
    })

    test('1/0 gives an error reply, ZeroDivisionError', { timeout: 60000 }, async () => {
      const { reply, iopub } = await execute(kernel, '1/0')
      assert.equal(reply.content.status, 'error')
      assert.equal(reply.content.ename, 'ZeroDivisionError')
      const errors = ofType(iopub, 'error')
      assert.equal(errors.length, 1)
      assert.equal(errors[0].content.ename, 'ZeroDivisionError')
      assert.ok(errors[0].content.traceback.join('\n').includes('ZeroDivisionError'))
      // The kernel goes on.
      assert.deepEqual(resultText((await execute(kernel, '6*7')).iopub), ['42'])
    })

    test('interrupt during time.sleep(30) ends it with KeyboardInterrupt', { timeout: 60000 }, async () => {
      let started = false
      const began = Date.now()
      const running = execute(kernel, 'import time; time.sleep(30); slept = True', {
        onIOPub: (m) => { if (m.header.msg_type === 'execute_input') started = true },
      })
      await waitFor('the cell to start', () => started)
      await sleep(300)
      await kernel.interrupt()
      const { reply, iopub } = await running
      assert.ok(Date.now() - began < 20000, 'the sleep was cut short')
      assert.equal(reply.content.status, 'error')
      assert.equal(reply.content.ename, 'KeyboardInterrupt')
      assert.ok(ofType(iopub, 'error').some((m) => m.content.ename === 'KeyboardInterrupt'))
      assert.deepEqual(resultText((await execute(kernel, '"slept" in globals()')).iopub), ['False'])
    })

    test('restart: the state is gone, the id is the same', { timeout: 90000 }, async () => {
      const id = kernel.id
      assert.equal((await execute(kernel, 'kept = 5')).reply.content.status, 'ok')
      assert.deepEqual(resultText((await execute(kernel, 'kept')).iopub), ['5'])
      await kernel.restart()
      await waitFor('the kernel to be idle after the restart', () => kernel.status === 'idle', 60000)
      assert.equal(kernel.id, id)
      const { reply } = await execute(kernel, 'kept')
      assert.equal(reply.content.status, 'error')
      assert.equal(reply.content.ename, 'NameError')
      await manager.refreshRunning()
      assert.ok([...manager.running()].some((m) => m.id === id))
      assert.deepEqual(resultText((await execute(kernel, '2+3')).iopub), ['5'])
    })

    test('two connections to one kernel both see the iopub of one execute', { timeout: 60000 }, async () => {
      const other = manager.connectTo({ model: { id: kernel.id, name: kernel.name } })
      try {
        assert.notEqual(other.clientId, kernel.clientId)
        await other.info
        await waitFor('the second connection', () => other.connectionStatus === 'connected')
        const seen = []
        const onMessage = (_, { msg, direction }) => {
          if (direction === 'recv' && msg.channel === 'iopub') seen.push(msg)
        }
        other.anyMessage.connect(onMessage)
        const { reply, iopub } = await execute(kernel, 'print("to both"); 40+2')
        assert.equal(reply.content.status, 'ok')
        const parent = reply.parent_header.msg_id
        const others = () => seen.filter((m) => m.parent_header.msg_id === parent)
        await waitFor('idle on the second connection',
          () => others().some((m) => m.header.msg_type === 'status' && m.content.execution_state === 'idle'))
        assert.equal(stdout(others()), 'to both\n')
        assert.deepEqual(resultText(others()), ['42'])
        assert.deepEqual(others().map((m) => m.header.msg_id), iopub.map((m) => m.header.msg_id))
        other.anyMessage.disconnect(onMessage)
        // The reply went to the first client only; the second can execute too.
        const { iopub: second } = await execute(other, '"from the other"')
        assert.deepEqual(resultText(second), ["'from the other'"])
      } finally {
        other.dispose()
      }
    })

    test('a comm with binary buffers, both ways', { timeout: 60000 }, async () => {
      const target = `kb_echo_${framing}`
      const setup = await execute(kernel, [
        'def _kb_open(comm, open_msg):',
        '    comm.send({"opened": open_msg["content"]["data"]},',
        '              buffers=[bytes(b)[::-1] for b in open_msg["buffers"]])',
        '    @comm.on_msg',
        '    def _echo(msg):',
        '        comm.send({"echo": msg["content"]["data"]},',
        '                  buffers=[bytes(b)[::-1] for b in msg["buffers"]])',
        `get_ipython().kernel.comm_manager.register_target(${JSON.stringify(target)}, _kb_open)`,
      ].join('\n'))
      assert.equal(setup.reply.content.status, 'ok', JSON.stringify(setup.reply.content))
      const comm = kernel.createComm(target)
      const received = []
      comm.onMsg = (msg) => { received.push(msg) }
      const bytes = (msg, i) => {
        const b = msg.buffers[i]
        return Buffer.from(b.buffer ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : new Uint8Array(b))
      }
      await comm.open({ hello: 'open' }, {}, [new Uint8Array([1, 2, 3, 0, 255])]).done
      await waitFor('the open echo', () => received.length >= 1)
      assert.deepEqual(received[0].content.data, { opened: { hello: 'open' } })
      assert.equal(received[0].buffers.length, 1)
      assert.deepEqual([...bytes(received[0], 0)], [255, 0, 3, 2, 1])
      const big = new Uint8Array(70000).map((_, i) => i % 251)
      await comm.send({ n: 2 }, {}, [new Uint8Array([9, 8]), big]).done
      await waitFor('the message echo', () => received.length >= 2)
      assert.deepEqual(received[1].content.data, { echo: { n: 2 } })
      assert.equal(received[1].buffers.length, 2)
      assert.deepEqual([...bytes(received[1], 0)], [8, 9])
      assert.ok(bytes(received[1], 1).equals(Buffer.from(big).reverse()))
      await comm.close().done
    })

    test('input(): an input_request on stdin, answered with an input_reply', { timeout: 60000 }, async () => {
      const prompts = []
      const { reply, iopub } = await execute(kernel, 'answer = input("name? ")\nprint("hello", answer)', {
        onStdin: (msg) => {
          prompts.push(msg)
          kernel.sendInputReply({ status: 'ok', value: 'jupyter' }, msg.header)
        },
      })
      assert.equal(prompts.length, 1)
      assert.equal(prompts[0].header.msg_type, 'input_request')
      assert.equal(prompts[0].content.prompt, 'name? ')
      assert.equal(reply.content.status, 'ok')
      assert.equal(stdout(iopub), 'hello jupyter\n')
    })

    test('shutdown: the kernel is gone', { timeout: 60000 }, async () => {
      const id = kernel.id
      await kernel.shutdown()
      assert.equal(kernel.status, 'dead')
      assert.equal(await KernelAPI.getKernelModel(id, settings()), undefined)
      await manager.refreshRunning()
      assert.ok(![...manager.running()].some((m) => m.id === id))
    })
  })
}

// Jupyter Server sends `status: restarting` on iopub only when its
// KernelRestarter restarts a kernel that died (jupyter_server's
// ZMQChannelsHandler.on_kernel_restarted, a restart callback, which
// jupyter_client fires for auto-restarts only), never for a restart a client
// asked for (POST /api/kernels/{id}/restart). services reads that status as
// "the server auto-restarted a dead kernel": the connection goes
// 'autorestarting', drops its futures and comms and reconnects once more,
// and JupyterLab's notebook then shows "The kernel ... appears to have died.
// It will restart automatically." after every Restart Kernel.
test('a requested restart is not an autorestart', { timeout: 90000 }, async () => {
  const manager = new KernelManager({ serverSettings: settings() })
  await manager.ready
  const kernel = await manager.startNew({ name: 'python3' })
  try {
    await kernel.info
    const statuses = []
    kernel.statusChanged.connect((_, status) => statuses.push(status))
    await kernel.restart()
    await waitFor('the kernel to be idle after the restart', () => kernel.status === 'idle', 60000)
    await sleep(500)
    assert.ok(!statuses.includes('autorestarting'),
      'the connection went through ' + JSON.stringify(statuses))
  } finally {
    await kernel.shutdown().catch(() => {})
    manager.dispose()
  }
})

test('sessions: start, list, find by path, rename, shutdown', { timeout: 90000 }, async () => {
  const kernelManager = new KernelManager({ serverSettings: settings() })
  const manager = new SessionManager({ kernelManager, serverSettings: settings() })
  try {
    await manager.ready
    const session = await manager.startNew({
      path: 'a.ipynb', type: 'notebook', name: 'a.ipynb', kernel: { name: 'python3' },
    })
    assert.equal(session.path, 'a.ipynb')
    assert.equal(session.name, 'a.ipynb')
    assert.equal(session.type, 'notebook')
    assert.ok(session.kernel, 'the session has a kernel')
    assert.equal(session.kernel.name, 'python3')
    const kernelId = session.kernel.id

    await manager.refreshRunning()
    const listed = [...manager.running()]
    assert.ok(listed.some((m) => m.id === session.id && m.path === 'a.ipynb' && m.kernel.id === kernelId),
      JSON.stringify(listed))
    const found = await manager.findByPath('a.ipynb')
    assert.equal(found?.id, session.id)
    assert.equal(found.kernel.id, kernelId)
    assert.equal(await manager.findByPath('nowhere.ipynb'), undefined)
    assert.equal((await manager.findById(session.id))?.path, 'a.ipynb')

    // The session's kernel runs code.
    const { iopub } = await execute(session.kernel, 'x = 20; x + 1')
    assert.deepEqual(resultText(iopub), ['21'])

    await session.setPath('b.ipynb')
    assert.equal(session.path, 'b.ipynb')
    assert.equal((await SessionAPI.getSessionModel(session.id, settings())).path, 'b.ipynb')
    assert.equal((await manager.findByPath('b.ipynb'))?.id, session.id)
    assert.equal(await manager.findByPath('a.ipynb'), undefined)
    await session.setName('b.ipynb')
    assert.equal((await SessionAPI.getSessionModel(session.id, settings())).name, 'b.ipynb')
    // Renaming keeps the kernel and its state.
    assert.equal(session.kernel.id, kernelId)
    assert.deepEqual(resultText((await execute(session.kernel, 'x')).iopub), ['20'])

    await session.shutdown()
    await manager.refreshRunning()
    assert.ok(![...manager.running()].some((m) => m.id === session.id))
    assert.equal(await manager.findByPath('b.ipynb'), undefined)
    // Deleting the session deleted its kernel.
    await kernelManager.refreshRunning()
    assert.ok(![...kernelManager.running()].some((m) => m.id === kernelId))
    assert.equal(await KernelAPI.getKernelModel(kernelId, settings()), undefined)
  } finally {
    manager.dispose()
    kernelManager.dispose()
  }
})

test('the kernel websocket refuses a wrong token', { timeout: 30000 }, async () => {
  const kernelManager = new KernelManager({ serverSettings: settings() })
  await kernelManager.ready
  const kernel = await kernelManager.startNew({ name: 'python3' })
  try {
    for (const token of [TOKEN + 'x', '']) {
      const url = `ws://127.0.0.1:${port}/api/kernels/${kernel.id}/channels?session_id=s` +
        (token ? `&token=${encodeURIComponent(token)}` : '')
      const status = await new Promise((resolve, reject) => {
        const ws = new WebSocket(url, [V1])
        ws.on('unexpected-response', (_, res) => { resolve(res.statusCode); ws.terminate() })
        ws.on('open', () => { ws.terminate(); reject(new Error('opened with a wrong token')) })
        ws.on('error', () => {})
      })
      assert.ok([401, 403].includes(status), `status ${status}`)
    }
    // The right one as a query parameter works (services sends it so in Node).
    const url = `ws://127.0.0.1:${port}/api/kernels/${kernel.id}/channels?session_id=s&token=${encodeURIComponent(TOKEN)}`
    const protocol = await new Promise((resolve, reject) => {
      const ws = new WebSocket(url, [V1])
      ws.on('open', () => { resolve(ws.protocol); ws.close() })
      ws.on('unexpected-response', (_, res) => reject(new Error('refused: ' + res.statusCode)))
      ws.on('error', reject)
    })
    assert.equal(protocol, V1)
  } finally {
    await kernel.shutdown().catch(() => {})
    kernelManager.dispose()
  }
})
