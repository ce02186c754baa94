// The console: the token form, the navigation, the live stream, and which page shows.
import {Api, Live} from './api.js';
import {pages} from './pages.js';

const KEY = 'chatkernel-console-token';
const main = document.getElementById('main');
const nav = document.getElementById('nav');
const form = document.getElementById('login');
const liveBadge = document.getElementById('live');
let api = null;
let live = null;
let current = null;  // {name, arg, page}

// A link from `chatkernel console` carries the token in the fragment (#token=...): it
// is kept for this tab and taken out of the address at once.
function takeTokenFromAddress() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, '', location.pathname + '#overview');
  return decodeURIComponent(match[1]);
}

function askForToken(message) {
  if (live) live.close();
  live = null;
  api = null;
  sessionStorage.removeItem(KEY);
  nav.hidden = true;
  liveBadge.hidden = true;
  main.replaceChildren();
  form.hidden = false;
  document.getElementById('login-error').textContent = message || '';
  document.getElementById('token').focus();
}

async function start(token) {
  api = new Api(token, (error) => askForToken(error ? 'The gateway refused this token.' : ''));
  try {
    await api.get('/api/overview');
  } catch (error) {
    if (error.status === 401) return;  // askForToken ran
    if (error.status === 429) { askForToken('Too many wrong tokens: wait a moment.'); return; }
    // Not reachable now: the page shows it, and the live stream keeps trying.
  }
  sessionStorage.setItem(KEY, token);
  form.hidden = true;
  nav.hidden = false;
  liveBadge.hidden = false;
  live = new Live(api, {
    onChanged: (topics) => current && current.page.changed &&
      (topics.includes('*') || topics.some((t) => current.page.topics.includes(t))) &&
      current.page.changed(),
    onLog: (line) => current && current.page.log && current.page.log(line),
    onState: (on) => {
      liveBadge.textContent = on ? 'live' : 'reconnecting…';
      liveBadge.classList.toggle('on', on);
    },
  });
  live.open();
  route();
}

function route() {
  if (!api) return;
  const [name, ...rest] = (location.hash.replace(/^#/, '') || 'overview').split('/');
  const make = pages[name] || pages.overview;
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : null;
  for (const link of nav.querySelectorAll('a')) {
    link.classList.toggle('current', link.dataset.page === (pages[name] ? name : 'overview'));
  }
  if (current && current.page.leave) current.page.leave();
  const page = make(api, arg);
  current = {name, arg, page};
  main.replaceChildren(page.element);
  document.title = `${page.title} — chatkernel console`;
  page.changed();
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = document.getElementById('token').value.trim();
  if (token) start(token);
});
window.addEventListener('hashchange', () => {
  const token = takeTokenFromAddress();
  if (token) start(token); else route();
});

const token = takeTokenFromAddress() || sessionStorage.getItem(KEY);
if (token) start(token); else askForToken();
