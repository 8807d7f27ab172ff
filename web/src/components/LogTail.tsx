import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';

import { api, unwrap, type Attempt } from '../api/client';
import { bytes } from '../format';
import { ErrorBox, Loading } from './states';

const TAIL_BYTES = 64 * 1024;

/** The end of an attempt's output, following it while the run is live. */
export function LogTail({ runId, attempts, live }: { runId: number; attempts: Attempt[]; live: boolean }) {
  const [picked, setPicked] = useState<number | undefined>(undefined); // undefined: the latest
  const log = useQuery({
    queryKey: ['log', runId, picked],
    placeholderData: keepPreviousData,
    refetchInterval: live ? 3_000 : false,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/runs/{run_id}/log-tail', {
          params: { path: { run_id: runId }, query: { attempt: picked, tail_bytes: TAIL_BYTES } },
        }),
      ),
  });
  const view = useRef<HTMLPreElement>(null);
  const text = log.data?.text;

  // Follow the end as lines arrive, unless the reader scrolled up to read.
  useEffect(() => {
    const element = view.current;
    if (!element) return;
    const nearEnd = element.scrollHeight - element.scrollTop - element.clientHeight < 48;
    if (nearEnd || element.scrollTop === 0) element.scrollTop = element.scrollHeight;
  }, [text]);

  return (
    <>
      <div className="toolbar">
        <label>
          Attempt
          <select value={picked ?? ''} onChange={(event) => setPicked(event.target.value ? Number(event.target.value) : undefined)}>
            <option value="">latest</option>
            {attempts.map((attempt) => (
              <option key={attempt.number} value={attempt.number}>
                #{attempt.number} ({attempt.start_reason})
              </option>
            ))}
          </select>
        </label>
        {log.data && log.data.size_bytes > 0 && (
          <span className="muted">
            {log.data.truncated ? `the last ${bytes(TAIL_BYTES)} of ${bytes(log.data.size_bytes)}` : bytes(log.data.size_bytes)}
            {live && ', following'}
          </span>
        )}
      </div>
      {log.isPending && <Loading what="the log" />}
      {log.isError && <ErrorBox error={log.error} retry={() => void log.refetch()} />}
      {log.data && log.data.message && <p className="empty">{log.data.message[0]?.toUpperCase() + log.data.message.slice(1)}.</p>}
      {log.data && !log.data.message && (
        <pre className="yaml log" ref={view} tabIndex={0} aria-label={`Log of attempt ${log.data.attempt}`}>
          {log.data.text || '(empty so far)'}
        </pre>
      )}
    </>
  );
}
