// The console's client of the gateway's /api/: the token goes in a header, never in a
// URL; the live stream opens with a one-time ticket fetched with the token.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export class Api {
  constructor(token, onUnauthorized) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  async request(method, path, body) {
    const headers = {Authorization: `Bearer ${this.token}`};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {method, headers, cache: 'no-store',
                                    body: body === undefined ? undefined : JSON.stringify(body)});
    } catch (error) {
      throw new ApiError(0, 'the gateway did not answer');
    }
    let data = {};
    try { data = await response.json(); } catch (error) { /* not JSON */ }
    if (response.status === 401) this.onUnauthorized(data.error);
    if (!response.ok) throw new ApiError(response.status, data.error || `HTTP ${response.status}`);
    return data;
  }

  get(path) { return this.request('GET', path); }
  post(path, body = {}) { return this.request('POST', path, body); }
}

// The live stream: `changed` events name the topics to read again, `log` events carry
// log lines. After a gateway restart the browser's own reconnect meets a used ticket
// (401), the stream closes, and this fetches a new ticket and opens it again.
export class Live {
  constructor(api, {onChanged, onLog, onState}) {
    Object.assign(this, {api, onChanged, onLog, onState});
    this.source = null;
    this.timer = null;
    this.stopped = false;
  }

  async open() {
    clearTimeout(this.timer);
    if (this.stopped) return;
    let ticket;
    try {
      ({ticket} = await this.api.post('/api/events/ticket'));
    } catch (error) {
      this.onState(false);
      if (error.status !== 401) this.timer = setTimeout(() => this.open(), 1000);
      return;
    }
    const source = this.source = new EventSource(`/api/events?ticket=${encodeURIComponent(ticket)}`);
    source.addEventListener('hello', () => {
      this.onState(true);
      this.onChanged(['*']);  // what changed while it was away is read again
    });
    source.addEventListener('changed', (event) => this.onChanged(JSON.parse(event.data).topics));
    source.addEventListener('log', (event) => this.onLog(JSON.parse(event.data)));
    source.addEventListener('error', () => {
      this.onState(false);
      if (source.readyState === EventSource.CLOSED && source === this.source) {
        this.timer = setTimeout(() => this.open(), 500);
      }
    });
  }

  close() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.source) this.source.close();
  }
}
