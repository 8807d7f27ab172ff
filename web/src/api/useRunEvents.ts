import { useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useRef, useState } from 'react';

import { readSse } from '../lib/sse';
import { api, ApiError, unwrap, type RunEvent } from './client';

export type StreamState = 'off' | 'connecting' | 'live' | 'reconnecting';

const RECONNECT_MS = 2_000;
// What an event can change on the run page; refetched when one arrives.
const TOUCHED = ['run', 'attempts', 'checkpoints', 'evals', 'goodput'];

/**
 * The run's events: the history once, then new ones as the server pushes them over SSE while
 * `live`, resuming after a dropped connection from the last event seen.
 */
export function useRunEvents(runId: number, live: boolean, enabled = true) {
  const queryClient = useQueryClient();
  const events = useQuery({
    queryKey: ['events', runId],
    enabled,
    queryFn: async () =>
      unwrap(
        await api.GET('/api/v1/runs/{run_id}/events', {
          params: { path: { run_id: runId }, query: { limit: 5000 } },
        }),
      ),
  });
  const [stream, setStream] = useState<StreamState>('off');
  const lastId = useRef(0);
  const loaded = events.isSuccess;

  // Declared before the stream's effect so a reconnect resumes after the newest event held.
  useEffect(() => {
    lastId.current = Math.max(lastId.current, events.data?.at(-1)?.id ?? 0);
  }, [events.data]);

  useEffect(() => {
    if (!live || !loaded) return;
    const controller = new AbortController();
    const { signal } = controller;

    function receive(event: RunEvent) {
      lastId.current = Math.max(lastId.current, event.id);
      queryClient.setQueryData<RunEvent[]>(['events', runId], (old = []) =>
        old.some((seen) => seen.id === event.id) ? old : [...old, event],
      );
      for (const key of TOUCHED) void queryClient.invalidateQueries({ queryKey: [key, runId] });
    }

    async function follow() {
      setStream('connecting');
      while (!signal.aborted) {
        try {
          const { response } = await api.GET('/api/v1/runs/{run_id}/events/stream', {
            params: { path: { run_id: runId }, header: { 'last-event-id': lastId.current } },
            parseAs: 'stream',
            signal,
          });
          if (!response.ok || !response.body) throw new ApiError(response.status, response.statusText);
          setStream('live');
          await readSse(response.body, (message) => receive(JSON.parse(message.data) as RunEvent));
        } catch (error) {
          if (signal.aborted) return;
          // A 4xx will not go away by asking again (the run was deleted, the token revoked).
          if (error instanceof ApiError && error.status >= 400 && error.status < 500) {
            setStream('off');
            return;
          }
        }
        setStream('reconnecting');
        await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
      }
    }

    void follow();
    return () => {
      controller.abort();
      setStream('off');
    };
  }, [live, loaded, runId, queryClient]);

  return { events, stream };
}
