import { describe, expect, it } from 'vitest';

import { endpointOf, freeName, lineOfPath, parseManifest, renamed } from './manifest';
import { runTemplate, sweepTemplate } from './templates';

const RUN = [
  'apiVersion: crucible.dev/v1alpha1', // 1
  'kind: TrainingRun', // 2
  'metadata:', // 3
  '  name: sft', // 4
  'spec:', // 5
  '  gpusPerNode: -1', // 6
  '  inputs:', // 7
  '    - dataset: sums@1', // 8
  '    - dataset: nope', // 9
  '      mountAs: x', // 10
  '  config: {train: {lr: fast}}', // 11
  '',
].join('\n');

describe('parseManifest', () => {
  it('reads YAML into the manifest', () => {
    const parsed = parseManifest(RUN);
    expect(parsed.ok).toBe(true);
    if (parsed.ok) expect(parsed.manifest).toMatchObject({ kind: 'TrainingRun', spec: { gpusPerNode: -1 } });
  });

  it('names the line of a syntax error', () => {
    const parsed = parseManifest('kind: TrainingRun\nmetadata:\n  name: [sft\nspec: {}\n');
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.line).toBeGreaterThanOrEqual(3);
      expect(parsed.message).not.toContain('\n');
    }
    const tabs = parseManifest('kind: TrainingRun\nspec:\n\texperiment: e\n');
    expect(tabs).toMatchObject({ ok: false, line: 3 });
  });
});

describe('lineOfPath', () => {
  it('finds the key a path names, through maps, lists and flow style', () => {
    expect(lineOfPath(RUN, 'metadata.name')).toBe(4);
    expect(lineOfPath(RUN, 'spec.gpusPerNode')).toBe(6);
    expect(lineOfPath(RUN, 'spec.inputs.1.dataset')).toBe(9);
    expect(lineOfPath(RUN, 'spec.inputs.1')).toBe(9);
    expect(lineOfPath(RUN, 'spec.config.train.lr')).toBe(11);
  });

  it("marks a missing field at its nearest parent that is there", () => {
    expect(lineOfPath(RUN, 'spec.experiment')).toBe(5);
    expect(lineOfPath(RUN, 'spec.inputs.5.dataset')).toBe(7);
    expect(lineOfPath(RUN, 'status')).toBeNull();
    expect(lineOfPath(RUN, '')).toBeNull();
    expect(lineOfPath('kind: [', 'kind')).toBeNull();
  });

  it('finds keys that hold dots, as a sweep parameter is named', () => {
    const sweep = sweepTemplate('lr');
    const line = lineOfPath(sweep, 'spec.parameters.config.train.lr');
    expect(sweep.split('\n')[(line ?? 0) - 1]).toContain('config.train.lr:');
  });
});

describe('freeName', () => {
  it('numbers a name on from 2, past the names taken', () => {
    expect(freeName('sft', new Set())).toBe('sft-2');
    expect(freeName('sft', new Set(['sft-2', 'sft-3']))).toBe('sft-4');
    expect(freeName('sft-2', new Set(['sft-3']))).toBe('sft-4');
    expect(freeName('run-7b', new Set())).toBe('run-7b-2');
  });

  it('keeps within the run-name limit', () => {
    const long = 'a'.repeat(39) + 'b';
    const name = freeName(long, new Set());
    expect(name).toHaveLength(40);
    expect(name.endsWith('a-2')).toBe(true);
    expect(freeName('x'.repeat(37) + '-', new Set(), 40)).toBe('x'.repeat(37) + '-2');
  });
});

describe('endpointOf and renamed', () => {
  it('sends a Sweep to /sweeps and any other kind to /runs', () => {
    expect(endpointOf({ kind: 'Sweep' })).toBe('sweeps');
    expect(endpointOf({ kind: 'EvalJob' })).toBe('runs');
    expect(endpointOf('text')).toBe('runs');
  });

  it('renames without touching the rest', () => {
    const manifest = { kind: 'TrainingRun', metadata: { name: 'a', labels: { x: 'y' } }, spec: {} };
    expect(renamed(manifest, 'b')).toEqual({ kind: 'TrainingRun', metadata: { name: 'b', labels: { x: 'y' } }, spec: {} });
    expect(manifest.metadata.name).toBe('a');
  });
});

describe('templates', () => {
  it('parse as the kinds they are named for', () => {
    expect(parseManifest(runTemplate('r'))).toMatchObject({ ok: true, manifest: { kind: 'TrainingRun', metadata: { name: 'r' } } });
    expect(parseManifest(sweepTemplate('s'))).toMatchObject({ ok: true, manifest: { kind: 'Sweep', metadata: { name: 's' } } });
  });
});
