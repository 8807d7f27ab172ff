// A YAML writer for run manifests (plain JSON values), so the run page shows the spec as it
// was submitted with `kubectl apply` or `crucible submit`, without a YAML library.

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// Strings YAML would read as something else (a number, a bool, null) or that hold syntax.
const PLAIN = /^[A-Za-z_./][A-Za-z0-9_./@-]*( [A-Za-z0-9_./@()-]+)*$/;
const RESERVED = /^(true|false|yes|no|on|off|null|~|y|n)$/i;

function scalar(value: null | boolean | number | string): string {
  if (value === null) return 'null';
  if (typeof value === 'boolean' || typeof value === 'number') return String(value);
  if (PLAIN.test(value) && !RESERVED.test(value)) return value;
  return JSON.stringify(value);
}

function isEmpty(value: Json): boolean {
  return Array.isArray(value) ? value.length === 0 : typeof value === 'object' && value !== null && Object.keys(value).length === 0;
}

function block(value: Json, indent: string): string[] {
  if (Array.isArray(value)) {
    return value.flatMap((item) => {
      if (item !== null && typeof item === 'object' && !isEmpty(item)) {
        const [first = '', ...rest] = block(item, `${indent}  `);
        return [`${indent}- ${first.trimStart()}`, ...rest];
      }
      return [`${indent}- ${inline(item)}`];
    });
  }
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([key, item]) => {
      const name = scalar(key);
      if (item !== null && typeof item === 'object' && !isEmpty(item)) {
        return [`${indent}${name}:`, ...block(item, `${indent}  `)];
      }
      return [`${indent}${name}: ${inline(item)}`];
    });
  }
  return [`${indent}${scalar(value)}`];
}

function inline(value: Json): string {
  if (Array.isArray(value)) return '[]';
  if (value !== null && typeof value === 'object') return '{}';
  return scalar(value);
}

export function toYaml(value: unknown): string {
  return `${block(value as Json, '').join('\n')}\n`;
}
