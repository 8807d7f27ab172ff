import { useQuery } from '@tanstack/react-query';

import { api, unwrap, type Run } from '../api/client';
import { age, orDash } from '../format';
import { Empty, ErrorBox, Loading } from './states';

/** The run's pods (Kubernetes) or process groups (local) as the backend last reported
 * them: where each runs and on how many GPUs. */
export function RunPods({ run, live }: { run: Run; live: boolean }) {
  const pods = useQuery({
    queryKey: ['pods', run.id],
    refetchInterval: live ? 5_000 : false,
    queryFn: async () => unwrap(await api.GET('/api/v1/runs/{run_id}/pods', { params: { path: { run_id: run.id } } })),
  });
  if (pods.isPending) return <Loading what="pods" />;
  if (pods.isError) return <ErrorBox error={pods.error} retry={() => void pods.refetch()} />;
  if (pods.data.length === 0) {
    return (
      <Empty>
        {live
          ? `No ${run.backend === 'local' ? 'processes' : 'pods'} right now. They are listed while an attempt runs, as the ${
              run.backend === 'local' ? 'local executor' : 'operator'
            } reports them every few seconds.`
          : 'None: the run has ended, and its pods went with it.'}
      </Empty>
    );
  }
  const local = pods.data.every((pod) => pod.cluster === 'local');
  return (
    <div className="scroll-x">
      <table aria-label="Pods">
        <thead>
          <tr>
            <th>{local ? 'Process group' : 'Pod'}</th>
            <th className="num">Attempt</th>
            <th className="num">Rank</th>
            <th>Phase</th>
            <th>{local ? 'Machine' : 'Node'}</th>
            <th className="num">GPUs</th>
            {local && <th>Devices</th>}
            {local && <th className="num">PID</th>}
            <th>Reported</th>
          </tr>
        </thead>
        <tbody>
          {pods.data.map((pod) => (
            <tr key={`${pod.namespace}/${pod.name}`}>
              <td>
                <code>{pod.namespace ? `${pod.namespace}/${pod.name}` : pod.name}</code>
              </td>
              <td className="num">{pod.attempt}</td>
              <td className="num">{pod.rank}</td>
              <td>{pod.phase}</td>
              <td>{pod.node ? <code>{pod.node}</code> : <span className="muted">not placed yet</span>}</td>
              <td className="num">{pod.gpus}</td>
              {local && <td>{orDash(pod.gpu_devices)}</td>}
              {local && <td className="num">{orDash(pod.pid)}</td>}
              <td>{age(pod.reported_at)} ago</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
