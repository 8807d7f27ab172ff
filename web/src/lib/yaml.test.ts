import { describe, expect, it } from 'vitest';

import { toYaml } from './yaml';

describe('toYaml', () => {
  it('writes a manifest as block YAML', () => {
    const manifest = {
      apiVersion: 'crucible.dev/v1alpha1',
      kind: 'TrainingRun',
      metadata: { name: 'arith-sft' },
      spec: { gpusPerNode: 2, config: { lr: 0.001, tags: [] }, inputs: [{ dataset: 'sums@1' }, 'x'] },
    };
    expect(toYaml(manifest)).toBe(
      [
        'apiVersion: crucible.dev/v1alpha1',
        'kind: TrainingRun',
        'metadata:',
        '  name: arith-sft',
        'spec:',
        '  gpusPerNode: 2',
        '  config:',
        '    lr: 0.001',
        '    tags: []',
        '  inputs:',
        '    - dataset: sums@1',
        '    - x',
        '',
      ].join('\n'),
    );
  });

  it('quotes strings YAML would read as another type or as syntax', () => {
    const text = toYaml({ a: 'true', b: '12', c: '', d: 'key: value', e: null, f: false });
    expect(text).toBe('a: "true"\nb: "12"\nc: ""\nd: "key: value"\ne: null\nf: false\n');
  });
});
