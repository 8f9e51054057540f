// A small typed client of kernelbridge's native API, written only against
// the types openapi-typescript generates from api/openapi.yaml
// (generated/api.d.ts, made at test time): if the document and the client
// disagree, `tsc --strict` fails; if the document and the daemon disagree,
// the scenario run against the real daemon fails.
import type { components, paths } from './generated/api.js'

export type Schemas = components['schemas']
export type Context = Schemas['Context']
export type InterpreterResult = Schemas['InterpreterResult']
export type ProcessRecord = Schemas['Process']
export type ApiErrorBody = Schemas['Error']
export type Health = paths['/health']['get']['responses'][200]['content']['application/json']
export type CreateContextRequest =
  paths['/contexts']['post']['requestBody']['content']['application/json']
export type RunRequest = paths['/run']['post']['requestBody']['content']['application/json']
export type Logs = paths['/processes/{id}/logs']['get']['responses'][200]['content']['application/json']
export type LogsQuery = NonNullable<paths['/processes/{id}/logs']['get']['parameters']['query']>
export type WaitState =
  paths['/processes/{id}/wait']['get']['responses'][200]['content']['application/json']

/** An error answer of the daemon: its status and typed Error body. */
export class ApiError extends Error {
  readonly status: number
  readonly body: ApiErrorBody

  constructor(status: number, body: ApiErrorBody) {
    super(`${body.code}: ${body.message}`)
    this.status = status
    this.body = body
  }
}

type Method = 'GET' | 'POST' | 'DELETE'

export class KernelbridgeClient {
  readonly baseUrl: string
  readonly token: string | undefined

  constructor(baseUrl: string, token?: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, '')
    this.token = token
  }

  private async call<T>(method: Method, path: string, status: number, body?: object): Promise<T> {
    const headers: Record<string, string> = { Accept: 'application/json' }
    if (this.token !== undefined) headers['Authorization'] = `Bearer ${this.token}`
    const init: RequestInit = { method, headers }
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json'
      init.body = JSON.stringify(body)
    }
    const response = await fetch(this.baseUrl + path, init)
    const text = await response.text()
    if (response.status !== status) {
      if (response.status >= 400) throw new ApiError(response.status, JSON.parse(text) as ApiErrorBody)
      throw new Error(`${method} ${path}: expected ${status}, got ${response.status}: ${text}`)
    }
    return (text === '' ? undefined : JSON.parse(text)) as T
  }

  private static id(value: string): string {
    return encodeURIComponent(value)
  }

  health(): Promise<Health> {
    return this.call('GET', '/health', 200)
  }

  createContext(request: CreateContextRequest): Promise<Context> {
    return this.call('POST', '/contexts', 201, request)
  }

  getContext(id: string): Promise<Context> {
    return this.call('GET', `/contexts/${KernelbridgeClient.id(id)}`, 200)
  }

  async deleteContext(id: string): Promise<void> {
    await this.call<undefined>('DELETE', `/contexts/${KernelbridgeClient.id(id)}`, 204)
  }

  run(request: RunRequest): Promise<InterpreterResult> {
    return this.call('POST', '/run', 200, request)
  }

  getProcess(id: string): Promise<ProcessRecord> {
    return this.call('GET', `/processes/${KernelbridgeClient.id(id)}`, 200)
  }

  waitProcess(id: string, timeout?: number): Promise<WaitState> {
    const query = timeout === undefined ? '' : `?timeout=${timeout}`
    return this.call('GET', `/processes/${KernelbridgeClient.id(id)}/wait${query}`, 200)
  }

  processLogs(id: string, query: LogsQuery = {}): Promise<Logs> {
    const params = new URLSearchParams()
    if (query.cursor !== undefined) params.set('cursor', String(query.cursor))
    if (query.limit !== undefined) params.set('limit', String(query.limit))
    const suffix = params.size ? `?${params}` : ''
    return this.call('GET', `/processes/${KernelbridgeClient.id(id)}/logs${suffix}`, 200)
  }
}
