/** The console's entry: sign-in, the layout with its navigation, and the router (hash URLs, so `/` is the only page the gateway serves). */
import { render } from 'preact';
import { lazy, Suspense } from 'preact/compat';
import { useEffect } from 'preact/hooks';
import { Link, Route, Router, Switch, useLocation } from 'wouter-preact';
import { useHashLocation } from 'wouter-preact/use-hash-location';
import { bearer, setBearer } from './api';
import { AgentsPage } from './pages/agents';
import { AsksPage } from './pages/asks';
import { AuditPage } from './pages/audit';
import { InboxPage } from './pages/inbox';
import { OwnerRoomPage } from './pages/owner-room';
import { RoomPage, RoomsPage } from './pages/rooms';
import { SignIn } from './pages/signin';
import { flash, me, needsInputCount, rooms, start, streamState, unread } from './state';
import './style.css';

// The charting library is most of the bundle: loaded when the cost page is first opened.
const CostPage = lazy(() => import('./pages/cost').then((m) => ({ default: m.CostPage })));
// The admin pages are for admins only: not in everyone's first load either.
const AdminPage = lazy(() => import('./pages/admin').then((m) => ({ default: m.AdminPage })));

function Nav() {
  const [loc] = useLocation();
  const totalUnread = Object.values(unread.value).reduce((a, b) => a + b, 0);
  const items: [string, string, number?][] = [
    ['/', 'Rooms', totalUnread],
    ['/asks', 'Needs input', needsInputCount.value],
    ['/inbox', 'Consent inbox'],
    ['/agents', 'My agents'],
    ['/cost', 'Cost'],
    ['/audit', 'Audit'],
  ];
  if (me.value?.role === 'admin' || me.value?.superadmin) items.push(['/admin', 'Admin']);
  return (
    <nav aria-label="Main">
      <ul>
        {items.map(([href, label, count]) => {
          const current = href === '/' ? loc === '/' || loc.startsWith('/rooms') : loc.startsWith(href);
          return (
            <li key={href}>
              <Link href={href} aria-current={current ? 'page' : undefined}>
                {label}
                {count ? (
                  <span
                    class={href === '/asks' ? 'badge badge-ask' : 'badge'}
                    data-testid={href === '/asks' ? 'needs-input-badge' : 'unread-total'}
                  >
                    {count}
                    <span class="sr-only"> {href === '/asks' ? 'open' : 'unread'}</span>
                  </span>
                ) : null}
              </Link>
            </li>
          );
        })}
      </ul>
    </nav>
  );
}

function Flash() {
  const f = flash.value;
  useEffect(() => {
    if (!f) return;
    const t = setTimeout(() => {
      flash.value = null;
    }, 6000);
    return () => clearTimeout(t);
  }, [f]);
  return (
    <div class="flash-area" aria-live="polite">
      {f ? (
        <p class={`flash flash-${f.kind}`} role={f.kind === 'error' ? 'alert' : 'status'}>
          {f.text}
        </p>
      ) : null}
    </div>
  );
}

function Shell() {
  const who = me.value;
  if (who === undefined) return <p class="loading">Loading…</p>;
  if (who === null) return <SignIn />;
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Parley</span>
        <Nav />
        <span class="who">
          <span class={`dot dot-${streamState.value}`} title={`stream ${streamState.value}`} />
          <span class="sr-only">stream {streamState.value}; </span>
          {who.name ?? who.id}
          {bearer() ? (
            <button
              type="button"
              class="link"
              onClick={() => {
                setBearer(null);
                location.hash = '#/';
                location.reload();
              }}
            >
              Sign out
            </button>
          ) : null}
        </span>
      </header>
      <Flash />
      {streamState.value === 'elsewhere' ? (
        <p class="banner" role="status">
          Live updates moved to another tab or client of yours.{' '}
          <button type="button" class="link" onClick={() => void start()}>
            Take them back here
          </button>
        </p>
      ) : null}
      <main id="main" tabIndex={-1}>
        <Switch>
          <Route path="/">
            <RoomsPage />
          </Route>
          <Route path="/rooms/:room">{(p) => <RoomPage room={p.room} key={p.room} />}</Route>
          <Route path="/asks">
            <AsksPage />
          </Route>
          <Route path="/inbox">
            <InboxPage />
          </Route>
          <Route path="/agents">
            <AgentsPage />
          </Route>
          <Route path="/agents/:agent/rooms/:room">
            {(p) => <OwnerRoomPage agent={p.agent} room={p.room} key={`${p.agent}/${p.room}`} />}
          </Route>
          <Route path="/cost">
            <Suspense fallback={<p>Loading charts…</p>}>
              <CostPage />
            </Suspense>
          </Route>
          <Route path="/audit/:of?">{(p) => <AuditPage of={p.of} />}</Route>
          <Route path="/admin">
            <Suspense fallback={<p>Loading…</p>}>
              <AdminPage />
            </Suspense>
          </Route>
          <Route>
            <p>Nothing here. {rooms.value.length} rooms.</p>
          </Route>
        </Switch>
      </main>
    </div>
  );
}

function App() {
  return (
    <Router hook={useHashLocation}>
      <Shell />
    </Router>
  );
}

void start();
render(<App />, document.getElementById('app') as HTMLElement);
