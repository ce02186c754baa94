// The console's pages. Each is made by a function of (api, argument) and returns
// {element, title, topics, changed(), log?(line), leave?()}: `changed` reads what it
// shows again (called at first, and when the live stream names one of its topics);
// what a person types lives outside the part that is redrawn.
import {ago, duration, h, svg, table, toast, when} from './dom.js';

function failure(box, error) {
  box.replaceChildren(h('p', {class: 'error', role: 'alert'}, error.message));
}

// Redraws `box` from `load()`, one read at a time (a change during a read reads again).
function refresher(box, load) {
  let running = null;
  let again = false;
  return async function refresh() {
    if (running) { again = true; return running; }
    running = (async () => {
      do {
        again = false;
        try {
          box.replaceChildren(...[await load()].flat());
        } catch (error) {
          failure(box, error);
        }
      } while (again);
      running = null;
    })();
    return running;
  };
}

async function act(button, action, done) {
  button.disabled = true;
  try {
    const answer = await action();
    if (done) done(answer);
  } catch (error) {
    toast(error.message);
  } finally {
    button.disabled = false;
  }
}

// -- Overview ---------------------------------------------------------------------------

function overview(api) {
  const box = h('div', {id: 'overview'});
  const load = async () => {
    const data = await api.get('/api/overview');
    const g = data.gateway;
    const counts = data.counts;
    const failed = counts.failed_sends || 0;
    const pairing = counts.pairing_pending;
    const rows = data.accounts.map((a) => h('tr', {class: `account ${a.health}`,
                                                   'data-account': a.key, 'data-health': a.health},
      h('td', {}, h('span', {class: `dot ${a.health}`, title: a.health})),
      h('td', {}, h('strong', {}, a.channel), ':', a.account,
        a.problems.length ? h('ul', {class: 'error'}, a.problems.map((p) => h('li', {}, p))) : null),
      h('td', {class: 'state'}, a.state, a.detail ? h('div', {class: 'muted'}, a.detail) : null),
      h('td', {}, when(a.last_inbound_at)),
      h('td', {}, when(a.last_sent_at)),
      h('td', {class: 'queue'}, String(a.queue)),
      h('td', {class: 'outbox'}, String(a.outbox)),
      h('td', {class: 'hide-narrow'}, a.instance || h('span', {class: 'muted'}, '?'))));
    return [
      h('section', {id: 'gateway'},
        h('h1', {}, data.ok ? 'All healthy' : 'Problems', ' ',
          h('span', {id: 'overall', class: `badge ${data.ok ? 'ok' : 'bad'}`},
            data.ok ? 'ok' : 'problems')),
        data.problems.length ? h('ul', {class: 'error', id: 'problems'},
                                 data.problems.map((p) => h('li', {}, p))) : null,
        h('dl', {class: 'facts'},
          h('dt', {}, 'Version'), h('dd', {id: 'version'}, g.version),
          h('dt', {}, 'Up'), h('dd', {}, duration(g.uptime_s)),
          h('dt', {}, 'Store'), h('dd', {}, g.store, g.store_ok === false ?
            h('span', {class: 'error'}, ' (failing)') : null),
          h('dt', {}, 'Cluster'), h('dd', {}, g.role),
          h('dt', {}, 'Instance'), h('dd', {}, h('code', {}, g.instance || '?'), ` · pid ${g.pid}`))),
      h('div', {class: 'counts'},
        h('a', {class: `count${failed ? ' alert' : ''}`, href: '#deliveries', id: 'failed-count'},
          h('strong', {}, String(failed)), 'failed sends',
          counts.failed_last_hour !== null ? h('div', {class: 'muted'},
            `${counts.failed_last_hour} in the last hour`) : null),
        h('a', {class: `count${pairing ? ' alert' : ''}`, href: '#pairing', id: 'pairing-count'},
          h('strong', {}, pairing === null ? '–' : String(pairing)), 'pairing requests'),
        h('a', {class: 'count', href: '#sessions'},
          h('strong', {}, String(counts.sessions ?? 0)), 'sessions',
          h('div', {class: 'muted'}, `${counts.running_turns ?? 0} turn(s) running, ` +
            `${counts.queued_messages ?? 0} queued`))),
      h('section', {}, h('h2', {}, 'Channel accounts'),
        rows.length ? table(['', 'Account', 'State', 'Last inbound', 'Last sent', 'Queue',
                             'Outbox', 'Instance'], rows, {id: 'accounts'})
          : h('p', {class: 'muted'}, 'No accounts.')),
    ];
  };
  return {element: box, title: 'Overview', topics: ['overview'], changed: refresher(box, load)};
}

// -- Sessions ---------------------------------------------------------------------------

function policySwitch(api, key, policy, done) {
  const select = h('select', {'aria-label': 'Send policy', class: 'policy'},
    ['inherit', 'allow', 'deny'].map((p) => h('option', {value: p, selected: p === policy}, p)));
  select.addEventListener('change', () => act(select, () => api.post('/api/sessions/policy',
    {session: key, policy: select.value}), (answer) => {
    toast(`${answer.session}: send policy ${answer.policy}`);
    if (done) done();
  }));
  return select;
}

function sessions(api, key) {
  if (key) return session(api, key);
  const box = h('div', {id: 'sessions'});
  const load = async () => {
    const data = await api.get('/api/sessions');
    const rows = data.sessions.map((s) => h('tr', {'data-session': s.key},
      h('td', {}, h('a', {href: `#sessions/${encodeURIComponent(s.key)}`}, s.chat_id),
        s.thread_id ? h('span', {class: 'muted'}, ` thread ${s.thread_id}`) : null),
      h('td', {}, s.channel), h('td', {}, s.account), h('td', {}, s.agent),
      h('td', {}, policySwitch(api, s.key, s.policy)),
      h('td', {}, when(s.last_active_at))));
    return h('section', {}, h('h1', {}, `Sessions (${data.total})`),
      rows.length ? table(['Chat', 'Channel', 'Account', 'Agent', 'Send policy', 'Last active'],
                          rows, {id: 'session-list'})
        : h('p', {class: 'muted'}, 'No sessions yet.'));
  };
  return {element: box, title: 'Sessions', topics: ['sessions', 'overview'],
          changed: refresher(box, load)};
}

function session(api, key) {
  const log = h('div');
  const text = h('textarea', {id: 'send-text', 'aria-label': 'Message', placeholder: 'A message to send into this chat'});
  const status = h('span', {class: 'muted', id: 'send-status'});
  const sendButton = h('button', {class: 'primary', type: 'submit'}, 'Send');
  const form = h('form', {class: 'card', id: 'send-form'}, h('h2', {}, 'Send a message'), text,
    h('div', {class: 'row'}, sendButton, status));
  const load = async () => {
    const data = await api.get(`/api/sessions/log?key=${encodeURIComponent(key)}`);
    return h('section', {}, h('h2', {}, 'Transcript'),
      data.entries.length ? h('ul', {class: 'transcript', id: 'transcript'},
        data.entries.map((e) => h('li', {class: e.role, 'data-seq': e.seq},
          h('span', {class: 'role'}, e.role), h('span', {class: 'muted'}, ago(e.ts), ' '),
          h('div', {class: 'text'}, e.text))))
        : h('p', {class: 'muted'}, 'Nothing logged yet.'));
  };
  const refresh = refresher(log, load);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (!text.value.trim()) return;
    status.textContent = 'sending…';
    act(sendButton, () => api.post('/api/sessions/send', {session: key, text: text.value}),
      (answer) => {
        status.textContent = `sent: ${answer.outcome}`;
        if (answer.outcome === 'sent' || answer.outcome === 'accepted') text.value = '';
        refresh();
      });
  });
  const element = h('div', {id: 'session'},
    h('p', {}, h('a', {href: '#sessions'}, '← Sessions')),
    h('section', {}, h('h1', {}, h('code', {}, key)),
      h('div', {class: 'row'}, h('span', {}, 'Send policy'), h('span', {id: 'policy-slot'}))),
    form, log);
  api.get('/api/sessions').then((data) => {
    const found = data.sessions.find((s) => s.key === key);
    element.querySelector('#policy-slot').replaceChildren(
      policySwitch(api, key, found ? found.policy : 'inherit'));
  }).catch(() => {});
  return {element, title: 'Session', topics: ['sessions', 'deliveries'], changed: refresh};
}

// -- Pairing ----------------------------------------------------------------------------

function pairing(api) {
  const box = h('div', {id: 'pairing'});
  let refresh;
  const load = async () => {
    const data = await api.get('/api/pairing');
    const pending = data.requests.map((r) => {
      const body = {channel: r.channel, account: r.account, code: r.code};
      const approve = h('button', {class: 'primary'}, 'Approve');
      const deny = h('button', {class: 'danger'}, 'Deny');
      approve.addEventListener('click', () => act(approve, () => api.post('/api/pairing/approve', body),
        () => { toast(`approved ${r.sender}`); refresh(); }));
      deny.addEventListener('click', () => act(deny, () => api.post('/api/pairing/deny', body),
        () => { toast(`denied ${r.sender}`); refresh(); }));
      return h('tr', {'data-code': r.code},
        h('td', {}, `${r.channel}:${r.account}`),
        h('td', {}, r.name ? `${r.name} ` : '', h('code', {}, r.sender)),
        h('td', {}, h('code', {class: 'code'}, r.code)),
        h('td', {}, r.created_at), h('td', {}, h('div', {class: 'row'}, approve, deny)));
    });
    const allowed = data.allowed.map((a) => {
      const revoke = h('button', {class: 'danger'}, 'Revoke');
      revoke.addEventListener('click', () => act(revoke, () => api.post('/api/pairing/revoke',
        {channel: a.channel, account: a.account, sender: a.sender}),
      () => { toast(`revoked ${a.sender}`); refresh(); }));
      return h('tr', {'data-sender': a.sender},
        h('td', {}, `${a.channel}:${a.account}`), h('td', {}, h('code', {}, a.sender)),
        h('td', {}, a.approved_at), h('td', {}, revoke));
    });
    return [
      h('section', {}, h('h1', {}, `Pending requests (${pending.length})`),
        pending.length ? table(['Account', 'Sender', 'Code', 'Asked', ''], pending, {id: 'requests'})
          : h('p', {class: 'muted'}, 'No stranger is waiting.')),
      h('section', {}, h('h2', {}, `Approved senders (${allowed.length})`),
        allowed.length ? table(['Account', 'Sender', 'Approved', ''], allowed, {id: 'allowed'})
          : h('p', {class: 'muted'}, 'Nobody approved by pairing yet.')),
    ];
  };
  refresh = refresher(box, load);
  return {element: box, title: 'Pairing', topics: ['pairing'], changed: refresh};
}

// -- Deliveries -------------------------------------------------------------------------

function deliveries(api) {
  const box = h('div', {id: 'deliveries'});
  let refresh;
  const load = async () => {
    const data = await api.get('/api/deliveries');
    const rows = data.failed.map((f) => {
      const retry = h('button', {class: 'primary'}, 'Retry');
      const discard = h('button', {class: 'danger'}, 'Discard');
      retry.addEventListener('click', () => act(retry, () => api.post('/api/deliveries/retry', {id: f.id}),
        (answer) => { toast(`queued again as reply ${answer.reply_id}`); refresh(); }));
      discard.addEventListener('click', () => act(discard, () => api.post('/api/deliveries/discard', {id: f.id}),
        () => { toast(`discarded ${f.id}`); refresh(); }));
      return h('tr', {class: 'failure', 'data-id': f.id},
        h('td', {}, String(f.id)),
        h('td', {}, f.account, h('div', {class: 'muted'},
          h('a', {href: `#sessions/${encodeURIComponent(f.session)}`}, `chat ${f.chat_id}`))),
        h('td', {}, when(f.failed_at)),
        h('td', {class: 'err reason'}, f.reason),
        h('td', {class: 'preview'}, f.preview, h('div', {class: 'muted'}, `part ${f.part}`)),
        h('td', {}, h('div', {class: 'row'}, retry, discard)));
    });
    return h('section', {}, h('h1', {}, `Failed sends (${rows.length})`),
      h('p', {class: 'muted', id: 'last-hour'}, `${data.failed_last_hour} failed in the last hour. ` +
        'Retry queues one again, once, behind what its chat has queued.'),
      rows.length ? table(['Id', 'Chat', 'Failed', 'Reason', 'Text', ''], rows, {id: 'failed'})
        : h('p', {class: 'muted'}, 'No failed sends.'));
  };
  refresh = refresher(box, load);
  return {element: box, title: 'Deliveries', topics: ['deliveries'], changed: refresh};
}

// -- Logins -----------------------------------------------------------------------------

function qrCode(modules) {
  const size = modules.length;
  const image = svg('svg', {viewBox: `0 0 ${size} ${size}`, class: 'qr', role: 'img',
                           'aria-label': 'QR code', 'shape-rendering': 'crispEdges'});
  image.append(svg('rect', {width: size, height: size, fill: '#fff'}));
  let path = '';
  modules.forEach((row, y) => row.forEach((dark, x) => { if (dark) path += `M${x} ${y}h1v1h-1z`; }));
  image.append(svg('path', {d: path, fill: '#000'}));
  return image;
}

function logins(api) {
  const box = h('div', {id: 'logins'});
  const forms = h('div');
  let drawn = false;
  let refresh;
  const load = async () => {
    const data = await api.get('/api/logins');
    if (!drawn) {
      drawn = true;
      forms.replaceChildren(...(data.channels.length ? data.channels.map((c) => {
        const account = h('input', {value: c.accounts[0] || 'main', 'aria-label': `${c.channel} account`,
                                    name: 'account', size: 12});
        const base = h('input', {placeholder: 'default', 'aria-label': `${c.channel} API host`,
                                 name: 'api_base', size: 28});
        const button = h('button', {class: 'primary', 'data-channel': c.channel}, `Log in to ${c.channel}`);
        button.addEventListener('click', () => act(button, () => api.post('/api/logins/start',
          {channel: c.channel, account: account.value.trim() || 'main',
           api_base: base.value.trim() || null}), () => refresh()));
        return h('section', {}, h('h2', {}, c.channel), h('p', {class: 'muted'}, c.description),
          h('div', {class: 'row'}, h('label', {}, 'Account ', account),
            h('label', {}, 'API host ', base), button));
      }) : [h('section', {}, h('p', {class: 'muted'}, 'No installed channel has a login flow.'))]));
    }
    return data.logins.map((run) => {
      const cancel = h('button', {}, 'Cancel');
      cancel.addEventListener('click', () => act(cancel, () => api.post('/api/logins/cancel', {id: run.id})));
      const showQr = run.qr && !run.ended && run.state !== 'confirmed' && run.state !== 'reloading';
      return h('section', {class: 'login-run', 'data-login': run.id, 'data-state': run.state},
        h('h2', {}, run.key, ' ', h('span', {class: `badge ${run.state}`, id: `login-state-${run.id}`}, run.state)),
        h('p', {class: 'message'}, run.message),
        showQr ? qrCode(run.qr) : null,
        showQr && run.qr_text ? h('p', {class: 'muted'}, 'or open: ', h('code', {}, run.qr_text)) : null,
        run.ended ? null : cancel);
    });
  };
  refresh = refresher(box, load);
  return {element: h('div', {}, h('h1', {}, 'Logins'), forms, box), title: 'Logins',
          topics: ['logins'], changed: refresh};
}

// -- Config -----------------------------------------------------------------------------

function config(api) {
  const box = h('div', {id: 'config'});
  const load = async () => {
    const data = await api.get('/api/config');
    const v = data.validation;
    const findings = data.audit.findings.map((f) => h('tr', {'data-check': f.check || ''},
      h('td', {}, h('span', {class: `badge ${f.severity}`}, f.severity)),
      h('td', {}, f.message || f.title || ''), h('td', {class: 'muted'}, f.fix || '')));
    return [
      h('section', {}, h('h1', {}, 'Config'), h('p', {}, h('code', {}, data.path),
        data.exists ? '' : ' (no file: the defaults apply)'),
      h('p', {id: 'validation'}, h('span', {class: `badge ${v.ok ? 'ok' : 'bad'}`}, v.ok ? 'valid' : 'invalid'),
        ' ', v.ok ? 'The file passes the checks a start makes.' : v.error)),
      h('section', {}, h('h2', {}, `Security audit: ${data.audit.findings.length} finding(s)`),
        findings.length ? table(['Severity', 'Finding', 'How to fix'], findings, {id: 'audit'})
          : h('p', {class: 'muted'}, 'Nothing found.')),
      h('section', {}, h('h2', {}, 'In effect (secrets masked)'),
        h('pre', {id: 'effective'}, JSON.stringify(data.effective, null, 2))),
      h('section', {}, h('h2', {}, 'The file (secrets masked)'),
        h('pre', {id: 'file'}, JSON.stringify(data.file, null, 2))),
    ];
  };
  return {element: box, title: 'Config', topics: [], changed: refresher(box, load)};
}

// -- Logs -------------------------------------------------------------------------------

const LEVELS = ['debug', 'info', 'warning', 'error', 'critical'];

function logs(api) {
  const list = h('ul', {class: 'logs', id: 'log-lines'});
  const level = h('select', {'aria-label': 'Level', id: 'log-level'},
    LEVELS.map((l) => h('option', {value: l, selected: l === 'info'}, `${l} and above`)));
  const channel = h('select', {'aria-label': 'Channel', id: 'log-channel'}, h('option', {value: ''}, 'every channel'));
  let last = 0;
  const shows = (line) => LEVELS.indexOf(line.level) >= LEVELS.indexOf(level.value) &&
    (!channel.value || line.channel === channel.value);
  const add = (line) => {
    const stick = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
    list.append(h('li', {class: line.level, 'data-channel': line.channel || ''},
      `${new Date(line.ts * 1000).toISOString().slice(11, 19)} ${line.level.toUpperCase().padEnd(7)} ${line.logger}: ${line.message}`));
    while (list.children.length > 1000) list.firstChild.remove();
    if (stick) list.scrollTop = list.scrollHeight;
  };
  const load = async () => {
    const query = new URLSearchParams({level: level.value, limit: '500'});
    if (channel.value) query.set('channel', channel.value);
    const data = await api.get(`/api/logs?${query}`);
    if (channel.options.length === 1) {
      channel.append(...data.channels.map((c) => h('option', {value: c}, c)));
    }
    list.replaceChildren();
    data.lines.forEach(add);
    last = data.lines.length ? data.lines[data.lines.length - 1].id : 0;
  };
  level.addEventListener('change', load);
  channel.addEventListener('change', load);
  return {
    element: h('section', {}, h('h1', {}, 'Logs'),
      h('div', {class: 'row'}, level, channel, h('span', {class: 'muted'}, 'secrets are masked; new lines come live')),
      list),
    title: 'Logs', topics: [],
    changed: () => load().catch((e) => toast(e.message)),
    log: (line) => { if (line.id > last && shows(line)) { last = line.id; add(line); } },
  };
}

export const pages = {overview, sessions, pairing, deliveries, logins, config, logs};
