// Small DOM helpers: elements are built, never parsed from strings, so no value the
// gateway sends can become markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function svg(tag, attrs = {}) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  return el;
}

export function ago(ts) {
  if (ts === null || ts === undefined) return 'never';
  const seconds = Math.max(0, Math.floor(Date.now() / 1000 - ts));
  for (const [size, unit] of [[86400, 'd'], [3600, 'h'], [60, 'm']]) {
    if (seconds >= size) return `${Math.floor(seconds / size)}${unit} ago`;
  }
  return `${seconds}s ago`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return '?';
  const s = Math.floor(seconds);
  if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m`;
  return `${s}s`;
}

export function when(ts) {
  if (ts === null || ts === undefined) return h('span', {class: 'muted'}, 'never');
  const exact = new Date(ts * 1000).toISOString();
  return h('time', {datetime: exact, title: exact}, ago(ts));
}

export function table(head, rows, attrs = {}) {
  return h('div', {class: 'table-wrap'},
    h('table', attrs, h('thead', {}, h('tr', {}, head.map((name) => h('th', {}, name)))),
      h('tbody', {}, rows)));
}

export function toast(text) {
  const el = h('div', {class: 'toast', role: 'status'}, text);
  document.body.append(el);
  setTimeout(() => el.remove(), 4000);
}
