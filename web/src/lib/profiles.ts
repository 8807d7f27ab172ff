import type { Schemas } from '../api/client';

// The run page's profiles section: what to show of a run's profiles, each profile's title,
// the segments of its phase bar and the operators its table lists.

export type RunProfiles = Schemas['RunProfiles'];
export type Profile = Schemas['ProfilePublic'];
export type ProfileSummary = Schemas['ProfileSummary'];
export type PhaseName = Schemas['PhaseTime']['phase'];
export type Operator = Schemas['OperatorTime'];

export const PHASE_LABEL: Record<PhaseName, string> = {
  compute: 'Compute',
  communication: 'Communication',
  data_loading: 'Data loading',
  optimizer: 'Optimizer',
  idle: 'Idle',
};

/** Operators the table lists before "show all". */
export const TOP_OPERATORS_SHOWN = 10;

/** What the section shows: the profiles; only the API's message, where it says where a
 * run's profiles are (a Kubernetes run's are on its pods); or nothing at all, for a local run
 * that recorded none, as most do not. */
export function profilesView(data: RunProfiles, backend: Schemas['Backend']): 'profiles' | 'message' | 'nothing' {
  if (data.profiles.length > 0) return 'profiles';
  return backend !== 'local' && data.message ? 'message' : 'nothing';
}

/** "Rank 0 · steps 101–103", or "· step 5" for one step. */
export function profileTitle(profile: Profile): string {
  const steps =
    profile.first_step === profile.last_step
      ? `step ${profile.first_step}`
      : `steps ${profile.first_step}–${profile.last_step}`;
  return `Rank ${profile.rank} · ${steps}`;
}

export interface PhaseSegment {
  phase: PhaseName;
  label: string;
  share: number;
  totalUs: number;
  /** Where the segment starts along the bar, 0-1. */
  offset: number;
}

/** The bar's segments in the summary's order, those of no time left out; a share is of the
 * wall time, and the five make it up, so the segments fill the bar. */
export function phaseSegments(summary: ProfileSummary): PhaseSegment[] {
  let offset = 0;
  const segments: PhaseSegment[] = [];
  for (const { phase, share, total_us } of summary.phases) {
    if (!(share > 0)) continue;
    segments.push({ phase, label: PHASE_LABEL[phase], share, totalUs: total_us, offset });
    offset += share;
  }
  return segments;
}

/** The operators the table lists: the first TOP_OPERATORS_SHOWN unless all are asked for. */
export function shownOperators(operators: Operator[], showAll: boolean): Operator[] {
  return showAll ? operators : operators.slice(0, TOP_OPERATORS_SHOWN);
}
