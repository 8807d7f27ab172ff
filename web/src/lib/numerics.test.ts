import { describe, expect, it } from 'vitest';

import type { MetricSeries } from '../api/client';
import {
  MATMUL_ERROR_MAX_KEY,
  SATURATION_WARNING,
  WARNINGS_LISTED,
  alignOnSteps,
  amaxDrift,
  chunkKeys,
  columns,
  emulatedTable,
  fp8Table,
  isNumericsKey,
  parseNumericsKey,
  saturationWarnings,
  scaleDrift,
  shade,
  sharePercent,
  tableMax,
  warningLines,
  warningText,
  worstError,
  worstSeries,
} from './numerics';

function series(key: string, points: [number, number][]): MetricSeries {
  return {
    key,
    steps: points.map(([step]) => step),
    values: points.map(([, value]) => value),
    times: points.map(() => 1_700_000_000),
    total_points: points.length,
    downsampled: false,
  };
}

function latest(values: Record<string, number>) {
  return Object.entries(values).map(([key, value]) => ({ key, last_value: value }));
}

describe('parseNumericsKey', () => {
  it('splits an emulated key at its last slash and last underscore', () => {
    expect(parseNumericsKey('numerics/blocks.3.attn.qkv/grad_output_t_saturated')).toEqual({
      family: 'emulated',
      layer: 'blocks.3.attn.qkv',
      operand: 'grad_output_t',
      stat: 'saturated',
    });
    expect(parseNumericsKey('numerics/head/input_underflow')?.stat).toBe('underflow');
  });

  it('reads an fp8 key as operand and stat', () => {
    expect(parseNumericsKey('fp8/blocks.0.mlp.c_fc/grad_amax')).toEqual({
      family: 'fp8',
      layer: 'blocks.0.mlp.c_fc',
      operand: 'grad',
      stat: 'amax',
    });
    expect(parseNumericsKey('fp8/blocks.0.mlp.c_fc/input_scale')?.stat).toBe('scale');
  });

  it('reads an emulated operand amax', () => {
    expect(parseNumericsKey('numerics/blocks.3.attn.qkv/grad_output_t_amax')).toEqual({
      family: 'emulated',
      layer: 'blocks.3.attn.qkv',
      operand: 'grad_output_t',
      stat: 'amax',
    });
  });

  it('reads the GEMM error as a layer stat in both families, not as an operand', () => {
    expect(parseNumericsKey('numerics/blocks.0.attn.qkv/matmul_rel_error')).toEqual({
      family: 'emulated',
      layer: 'blocks.0.attn.qkv',
      stat: 'matmul_rel_error',
    });
    expect(parseNumericsKey('fp8/blocks.0.mlp.fc/matmul_rel_error')).toEqual({
      family: 'fp8',
      layer: 'blocks.0.mlp.fc',
      stat: 'matmul_rel_error',
    });
    // The run-level worst is an ordinary series, and a near miss of the name is no stat.
    expect(parseNumericsKey(MATMUL_ERROR_MAX_KEY)).toBeNull();
    expect(parseNumericsKey('numerics/blocks.0/input_matmul_rel_error')).toBeNull();
    expect(parseNumericsKey('numerics/matmul_rel_error')).toBeNull();
  });

  it('refuses keys of another shape', () => {
    expect(parseNumericsKey('loss')).toBeNull();
    expect(parseNumericsKey('numerics/saturated')).toBeNull();
    expect(parseNumericsKey('numerics/blocks.0/input_overflow')).toBeNull();
    expect(parseNumericsKey('fp8/blocks.0/input_saturated')).toBeNull();
    expect(parseNumericsKey('numerics/blocks.0/_saturated')).toBeNull();
  });

  it('tells the section keys from the charts', () => {
    expect(['loss', 'numerics/a/input_saturated', 'fp8/a/input_amax', 'train/fp8'].filter(isNumericsKey)).toEqual([
      'numerics/a/input_saturated',
      'fp8/a/input_amax',
    ]);
    expect(
      ['numerics/a/input_amax', 'numerics/a/matmul_rel_error', 'fp8/a/matmul_rel_error', MATMUL_ERROR_MAX_KEY].filter(
        isNumericsKey,
      ),
    ).toEqual(['numerics/a/input_amax', 'numerics/a/matmul_rel_error', 'fp8/a/matmul_rel_error']);
  });
});

describe('emulatedTable', () => {
  it('puts the worst saturation first, with operands in matmul order', () => {
    const table = emulatedTable(
      latest({
        loss: 2.5,
        'numerics/blocks.0.attn.qkv/input_saturated': 0.001,
        'numerics/blocks.0.attn.qkv/grad_output_underflow': 0.3,
        'numerics/blocks.10.mlp.c_fc/input_t_saturated': 0.032,
        'numerics/blocks.10.mlp.c_fc/weight_saturated': 0,
        'numerics/blocks.2.mlp.c_proj/weight_saturated': 0.001,
        'numerics/blocks.2.mlp.c_proj/grad_output_underflow': 0.4,
      }),
    );
    expect(table?.operands).toEqual(['input', 'weight', 'grad_output', 'input_t']);
    // The other two tie on saturation; the worse underflow goes first.
    expect(table?.rows.map((row) => row.layer)).toEqual(['blocks.10.mlp.c_fc', 'blocks.2.mlp.c_proj', 'blocks.0.attn.qkv']);
    expect(table?.rows[0]?.cells).toEqual({ input_t: { saturated: 0.032 }, weight: { saturated: 0 } });
  });

  it('falls back to module order when nothing saturates or underflows', () => {
    const table = emulatedTable(
      latest({ 'numerics/blocks.10.x/input_saturated': 0, 'numerics/blocks.2.x/input_saturated': 0 }),
    );
    expect(table?.rows.map((row) => row.layer)).toEqual(['blocks.2.x', 'blocks.10.x']);
  });

  it("keeps each layer's GEMM error beside its operands, not as an operand column", () => {
    const table = emulatedTable(
      latest({
        'numerics/a/input_saturated': 0.02,
        'numerics/a/input_amax': 6,
        'numerics/a/matmul_rel_error': 0.03,
        'numerics/b/input_saturated': 0,
        'numerics/b/matmul_rel_error': 0.05,
        'numerics/c/input_saturated': 0,
      }),
    );
    expect(table?.operands).toEqual(['input']);
    expect(table?.rows).toEqual([
      { layer: 'a', cells: { input: { saturated: 0.02, amax: 6 } }, error: 0.03 },
      { layer: 'b', cells: { input: { saturated: 0 } }, error: 0.05 },
      { layer: 'c', cells: { input: { saturated: 0 } } },
    ]);
    expect(table && columns(table, ['saturated', 'underflow'])).toEqual([{ operand: 'input', stat: 'saturated' }]);
    expect(table && worstError(table)).toEqual({ layer: 'b', error: 0.05 });
  });

  it('has no worst error before a step sampled one', () => {
    const table = emulatedTable(latest({ 'numerics/a/input_saturated': 0 }));
    expect(table && worstError(table)).toBeNull();
  });

  it('is null without emulated keys', () => {
    expect(emulatedTable(latest({ loss: 1, 'fp8/a/input_amax': 3 }))).toBeNull();
  });
});

describe('fp8Table', () => {
  it('lists each layer in module order with amax and scale by operand', () => {
    const table = fp8Table(
      latest({
        'fp8/blocks.10.attn/input_amax': 4,
        'fp8/blocks.10.attn/input_scale': 112,
        'fp8/blocks.1.attn/grad_amax': 0.5,
        'fp8/blocks.1.attn/weight_scale': 900,
      }),
    );
    expect(table?.operands).toEqual(['input', 'weight', 'grad']);
    expect(table?.rows).toEqual([
      { layer: 'blocks.1.attn', cells: { grad: { amax: 0.5 }, weight: { scale: 900 } } },
      { layer: 'blocks.10.attn', cells: { input: { amax: 4, scale: 112 } } },
    ]);
    expect(fp8Table(latest({ loss: 1 }))).toBeNull();
  });

  it('has a column for each stat some layer logged, and tints amax against its own column', () => {
    const table = fp8Table(
      latest({
        'fp8/a/input_amax': 4,
        'fp8/a/input_scale': 112,
        'fp8/b/input_amax': 8,
        'fp8/a/grad_amax': 0.5,
      }),
    );
    expect(table && columns(table, ['amax', 'scale'])).toEqual([
      { operand: 'input', stat: 'amax' },
      { operand: 'input', stat: 'scale' },
      { operand: 'grad', stat: 'amax' },
    ]);
    expect(table && tableMax(table, 'amax', 'input')).toBe(8);
    expect(table && tableMax(table, 'amax', 'grad')).toBe(0.5);
    expect(table && tableMax(table, 'amax')).toBe(8);
  });

  it('has no scale columns for a row- or block-scaled run, and its GEMM errors by layer', () => {
    const table = fp8Table(
      latest({
        'fp8/blocks.0.mlp.fc/input_amax': 4,
        'fp8/blocks.0.mlp.fc/weight_amax': 0.5,
        'fp8/blocks.0.mlp.fc/grad_amax': 0.25,
        'fp8/blocks.0.mlp.fc/matmul_rel_error': 0.04,
        [MATMUL_ERROR_MAX_KEY]: 0.04,
      }),
    );
    expect(table?.operands).toEqual(['input', 'weight', 'grad']);
    expect(table && columns(table, ['amax', 'scale'])).toEqual([
      { operand: 'input', stat: 'amax' },
      { operand: 'weight', stat: 'amax' },
      { operand: 'grad', stat: 'amax' },
    ]);
    expect(table?.rows[0]?.error).toBe(0.04);
    expect(table && worstError(table)).toEqual({ layer: 'blocks.0.mlp.fc', error: 0.04 });
  });
});

describe('saturationWarnings', () => {
  it('names every operand at or past the threshold, the worst first', () => {
    const table = emulatedTable(
      latest({
        'numerics/a/input_saturated': SATURATION_WARNING,
        'numerics/a/weight_saturated': SATURATION_WARNING * 0.99,
        'numerics/b/grad_output_saturated': 0.032,
        'numerics/b/grad_output_underflow': 0.9,
      }),
    );
    const warnings = table ? saturationWarnings(table) : [];
    expect(warnings).toEqual([
      { layer: 'b', operand: 'grad_output', share: 0.032 },
      { layer: 'a', operand: 'input', share: SATURATION_WARNING },
    ]);
    expect(warnings[0] && warningText(warnings[0])).toBe('layer b saturates 3.2% of its grad_output');
  });

  it('lists the worst few warnings by name and counts the rest', () => {
    const many = Array.from({ length: WARNINGS_LISTED + 3 }, (_, i) => ({
      layer: `blocks.${i}`,
      operand: 'input',
      share: 0.05 - i * 0.001,
    }));
    const lines = warningLines(many);
    expect(lines).toHaveLength(WARNINGS_LISTED + 1);
    expect(lines[0]).toBe('layer blocks.0 saturates 5% of its input');
    expect(lines.at(-1)).toBe('and 3 more, marked in the table below');
    expect(warningLines(many.slice(0, 2))).toHaveLength(2);
  });
});

describe('sharePercent and shade', () => {
  it('keeps two significant digits of a small share', () => {
    expect(sharePercent(0.032)).toBe('3.2%');
    expect(sharePercent(0.00041)).toBe('0.041%');
    expect(sharePercent(0.5)).toBe('50%');
    expect(sharePercent(0)).toBe('0%');
    expect(sharePercent(undefined)).toBe('—');
  });

  it('tints any non-zero value visibly and none past the scale', () => {
    expect(shade(0, 1)).toBe(0);
    expect(shade(undefined, 1)).toBe(0);
    expect(shade(1e-6, 1)).toBeGreaterThan(0);
    expect(shade(0.5, 1)).toBe(0.5);
    expect(shade(3, 1)).toBe(1);
  });
});

describe('worstSeries', () => {
  it('takes the largest share over layers and operands at each step', () => {
    const worst = worstSeries(
      [
        series('numerics/a/input_saturated', [[10, 0.001], [20, 0.02], [30, 0]]),
        series('numerics/b/grad_output_saturated', [[10, 0.005], [20, 0.001], [30, 0.003]]),
        series('numerics/b/grad_output_underflow', [[10, 0.9], [20, 0.9], [30, 0.9]]),
        series('loss', [[10, 5], [20, 5], [30, 5]]),
      ],
      'saturated',
      100,
    );
    expect(worst).toEqual({
      steps: [10, 20, 30],
      values: [0.005, 0.02, 0.003],
      keys: ['numerics/b/grad_output_saturated', 'numerics/a/input_saturated', 'numerics/b/grad_output_saturated'],
    });
  });

  it('keeps each span peak when the series kept different steps', () => {
    // Downsampled on their own, the two series kept different steps inside each span.
    const worst = worstSeries(
      [
        series('numerics/a/input_underflow', [[0, 0.1], [4, 0.5], [9, 0.2]]),
        series('numerics/b/input_underflow', [[1, 0.3], [6, 0.1], [8, 0.6]]),
      ],
      'underflow',
      2,
    );
    expect(worst.steps).toEqual([4, 8]);
    expect(worst.values).toEqual([0.5, 0.6]);
  });

  it('is empty without the stat', () => {
    expect(worstSeries([series('loss', [[1, 1]])], 'saturated', 10).steps).toEqual([]);
  });

  it('leaves out the amax and the GEMM error', () => {
    const worst = worstSeries(
      [
        series('numerics/a/input_saturated', [[10, 0.001]]),
        series('numerics/a/input_amax', [[10, 7]]),
        series('numerics/a/matmul_rel_error', [[10, 0.5]]),
      ],
      'saturated',
      10,
    );
    expect(worst.values).toEqual([0.001]);
  });
});

describe('alignOnSteps', () => {
  it('puts lines of different steps on one axis with gaps', () => {
    const aligned = alignOnSteps([
      { steps: [1, 3], values: [0.1, 0.3] },
      { steps: [1, 2, 3], values: [5, 4, 3] },
    ]);
    expect(aligned).toEqual([
      [1, 2, 3],
      [0.1, null, 0.3],
      [5, 4, 3],
    ]);
  });
});

describe('scaleDrift', () => {
  it('ranks layers by how far their input scale moved from its first value, either way', () => {
    const drifts = scaleDrift(
      [
        series('fp8/a/input_scale', [[1, 100], [2, 50]]),
        series('fp8/b/input_scale', [[1, 100], [2, 300]]),
        series('fp8/c/input_scale', [[1, 100], [2, 101]]),
        series('fp8/a/weight_scale', [[1, 100], [2, 1]]),
        series('fp8/d/input_scale', [[1, 0], [2, 1]]),
      ],
      2,
    );
    expect(drifts.map((drift) => drift.layer)).toEqual(['b', 'a']);
    expect(drifts[0]?.values).toEqual([1, 3]);
    expect(drifts[1]).toMatchObject({ steps: [1, 2], values: [1, 0.5], largest: 2 });
  });
});

describe('amaxDrift', () => {
  it('ranks layer operands by how far their amax moved, leaving out the transposed copies', () => {
    const drifts = amaxDrift(
      [
        series('numerics/a/input_amax', [[10, 2], [20, 8]]),
        series('numerics/a/input_t_amax', [[10, 2], [20, 80]]),
        series('numerics/b/grad_output_amax', [[10, 1], [20, 0.1]]),
        series('numerics/b/weight_amax', [[10, 1], [20, 1.1]]),
        series('numerics/b/weight_saturated', [[10, 1e-6], [20, 0.5]]),
        series('fp8/c/input_amax', [[10, 1], [20, 1000]]),
      ],
      2,
    );
    expect(drifts.map(({ layer, operand }) => `${layer} ${operand}`)).toEqual(['b grad_output', 'a input']);
    expect(drifts[0]).toMatchObject({ steps: [10, 20], largest: 10 });
    expect(drifts[0]?.values[1]).toBeCloseTo(0.1);
    expect(drifts[1]).toMatchObject({ values: [1, 4], largest: 4 });
  });
});

describe('chunkKeys', () => {
  it('keeps each request under the length and every key once, in order', () => {
    const keys = Array.from({ length: 576 }, (_, i) => `numerics/blocks.${i % 48}.mlp.c_fc/grad_output_t_saturated${i}`);
    const chunks = chunkKeys(keys, 4000);
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.flat()).toEqual(keys);
    for (const chunk of chunks) expect(chunk.map(encodeURIComponent).join(',').length).toBeLessThanOrEqual(4000);
  });

  it('sends a key longer than the limit on its own rather than dropping it', () => {
    expect(chunkKeys(['x'.repeat(50), 'y'], 10)).toEqual([['x'.repeat(50)], ['y']]);
  });
});
