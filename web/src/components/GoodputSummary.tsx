import type { RunGoodput } from '../api/client';
import { duration, percent } from '../format';

/** How much of the device time the run held moved training forward. */
export function GoodputSummary({ goodput }: { goodput: RunGoodput }) {
  const unit = goodput.devices === 1 ? 'device' : `${goodput.devices} devices`;
  return (
    <dl className="facts" aria-label="Goodput">
      <dt>Goodput</dt>
      <dd>
        <strong>{percent(goodput.goodput)}</strong>{' '}
        <span className="muted">productive over allocated device time, on {unit}</span>
      </dd>
      <dt>Allocated</dt>
      <dd>{duration(goodput.allocated_device_s)} device time</dd>
      <dt>Productive</dt>
      <dd>{duration(goodput.productive_device_s)}</dd>
      <dt>Lost to interruptions</dt>
      <dd>{duration(goodput.work_lost_device_s)} redone since the last checkpoint</dd>
      <dt>Restart overhead</dt>
      <dd>{duration(goodput.restart_overhead_device_s)} between attempts</dd>
    </dl>
  );
}
