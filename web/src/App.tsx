import { useQueryClient } from '@tanstack/react-query';
import { lazy, Suspense, useEffect, useReducer } from 'react';
import { flushSync } from 'react-dom';

import { clearToken, getToken } from './auth';
import { Loading } from './components/states';
import { ThemePicker } from './components/ThemePicker';
import { Experiment } from './pages/Experiment';
import { Project } from './pages/Project';
import { Projects } from './pages/Projects';
import { SignIn } from './pages/SignIn';
import { href, navigate, parseRoute, useHash } from './router';

// Pages with heavy libraries (uPlot for charts; React Flow and dagre for graphs) are loaded
// when first opened, so the runs table does not wait for them, nor the run page for graphs.
const Cluster = lazy(() => import('./pages/Cluster').then((m) => ({ default: m.Cluster })));
const Checkpoint = lazy(() => import('./pages/Checkpoint').then((m) => ({ default: m.Checkpoint })));
const Deployments = lazy(() => import('./pages/Deployments').then((m) => ({ default: m.Deployments })));
const Compare = lazy(() => import('./pages/Compare').then((m) => ({ default: m.Compare })));
const Lineage = lazy(() => import('./pages/Lineage').then((m) => ({ default: m.Lineage })));
const ProfileTrace = lazy(() => import('./pages/ProfileTrace').then((m) => ({ default: m.ProfileTrace })));
const Run = lazy(() => import('./pages/Run').then((m) => ({ default: m.Run })));
const Sweep = lazy(() => import('./pages/Sweep').then((m) => ({ default: m.Sweep })));
// The submit page carries CodeMirror and a YAML parser, which no other page needs.
const Submit = lazy(() => import('./pages/Submit').then((m) => ({ default: m.Submit })));

export function App() {
  const route = parseRoute(useHash());
  const signedIn = getToken() !== null;
  const queryClient = useQueryClient();
  // A new value each sign-out, so the re-render it asks for is never skipped as unchanged.
  const [, rerender] = useReducer((count: number) => count + 1, 0);

  useEffect(() => {
    if (!signedIn && route.page !== 'signin') navigate(href.signIn());
  }, [signedIn, route.page]);

  if (route.page === 'signin' || !signedIn) return <SignIn code={route.page === 'signin' ? route.code : undefined} />;

  function signOut() {
    clearToken();
    // Unmount the open page before emptying the cache: a page still mounted when its queries
    // vanish fetches them again, now without a token, and each answers 401.
    flushSync(rerender);
    queryClient.clear();
    navigate(href.signIn());
  }

  // Keyed by id so moving between two experiments starts each at its first page.
  return (
    <>
      <button type="button" className="skip" onClick={() => document.getElementById('main')?.focus()}>
        Skip to content
      </button>
      <header className="topbar">
        <div className="topbar-left">
          <a className="brand" href={href.projects()}>
            Crucible
          </a>
          <nav aria-label="Sections">
            <a href={href.projects()}>Projects</a>
            <a href={href.cluster()}>Cluster</a>
            <a href={href.deployments()}>Deployments</a>
          </nav>
        </div>
        <nav aria-label="Account">
          <ThemePicker />
          <button type="button" className="link" onClick={signOut}>
            Sign out
          </button>
        </nav>
      </header>
      <main id="main" tabIndex={-1}>
        <Suspense fallback={<Loading what="the page" />}>
          {route.page === 'projects' && <Projects />}
          {route.page === 'project' && <Project key={route.id} id={route.id} />}
          {route.page === 'submit' && (
            <Submit key={JSON.stringify(route)} projectId={route.projectId} start={route.start} />
          )}
          {route.page === 'experiment' && <Experiment key={route.id} id={route.id} search={route.search} />}
          {route.page === 'run' && <Run key={route.id} id={route.id} />}
          {route.page === 'profileTrace' && (
            <ProfileTrace key={`${route.runId}/${route.name}`} runId={route.runId} name={route.name} />
          )}
          {route.page === 'checkpoint' && <Checkpoint key={route.id} id={route.id} />}
          {route.page === 'lineage' && <Lineage node={route.node} />}
          {route.page === 'cluster' && <Cluster />}
          {route.page === 'deployments' && <Deployments />}
          {route.page === 'sweep' && <Sweep key={route.id} id={route.id} />}
          {route.page === 'compare' && <Compare key={route.runs.join(',')} runIds={route.runs} />}
          {route.page === 'notFound' && (
            <p className="empty">
              Nothing at <code>{route.path}</code>. <a href={href.projects()}>Go to the projects</a>.
            </p>
          )}
        </Suspense>
      </main>
    </>
  );
}
