import { describe, expect, it } from 'vitest';

import {
  phaseSegments,
  profilesView,
  profileTitle,
  shownOperators,
  TOP_OPERATORS_SHOWN,
  type Profile,
  type ProfileSummary,
} from './profiles';

const SUMMARY: ProfileSummary = {
  timeline: 'gpu',
  wall_us: 1000,
  busy_us: 900,
  annotated: true,
  phases: [
    { phase: 'compute', total_us: 600, share: 0.6 },
    { phase: 'communication', total_us: 0, share: 0 },
    { phase: 'data_loading', total_us: 50, share: 0.05 },
    { phase: 'optimizer', total_us: 250, share: 0.25 },
    { phase: 'idle', total_us: 100, share: 0.1 },
  ],
  top_operators: Array.from({ length: 14 }, (_, i) => ({ name: `kernel_${i}`, calls: 1, total_us: 14 - i, share: 0.01 })),
};

function profile(extra: Partial<Profile> = {}): Profile {
  return { name: 'rank0-steps101-103', rank: 0, first_step: 101, last_step: 103, summary: SUMMARY, trace_bytes: 2048, ...extra };
}

describe('profiles', () => {
  it('shows a run its profiles, a Kubernetes run where they are, and a local run without any nothing', () => {
    expect(profilesView({ run_id: 1, profiles: [profile()], message: '' }, 'local')).toBe('profiles');
    const elsewhere = { run_id: 1, profiles: [], message: 'a Kubernetes run writes its profiles to its pods' };
    expect(profilesView(elsewhere, 'kubernetes')).toBe('message');
    const none = { run_id: 1, profiles: [], message: 'no profiles on this machine; set config.train.profile_from_step' };
    expect(profilesView(none, 'local')).toBe('nothing');
  });

  it('titles a profile by its rank and steps', () => {
    expect(profileTitle(profile())).toBe('Rank 0 · steps 101–103');
    expect(profileTitle(profile({ rank: 3, first_step: 5, last_step: 5 }))).toBe('Rank 3 · step 5');
  });

  it('lays the phases end to end, leaving out those of no time', () => {
    const segments = phaseSegments(SUMMARY);
    expect(segments.map((s) => [s.label, s.offset, s.share, s.totalUs])).toEqual([
      ['Compute', 0, 0.6, 600],
      ['Data loading', 0.6, 0.05, 50],
      ['Optimizer', 0.65, 0.25, 250],
      ['Idle', 0.9, 0.1, 100],
    ]);
  });

  it('lists the top operators, or all of them when asked', () => {
    expect(shownOperators(SUMMARY.top_operators, false).map((o) => o.name)).toEqual(
      Array.from({ length: TOP_OPERATORS_SHOWN }, (_, i) => `kernel_${i}`),
    );
    expect(shownOperators(SUMMARY.top_operators, true)).toHaveLength(14);
  });
});
