import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node as YamlNode } from 'yaml';

// The submit page's arithmetic: the editor's YAML read into a manifest (or the line of its
// syntax error), the line each of the API's problem paths points at, the endpoint a kind is
// submitted to, and a free name for a resubmission.

/** What the editor holds, read: the manifest as JSON, or where the YAML is broken. */
export type ParsedManifest =
  | { ok: true; manifest: unknown }
  | { ok: false; line: number; message: string };

export function parseManifest(text: string): ParsedManifest {
  const lines = new LineCounter();
  const document = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const [error] = document.errors;
  if (error) {
    const line = error.linePos?.[0].line ?? lines.linePos(error.pos[0]).line;
    // The library's message ends with an excerpt of the line; the line number says where.
    return { ok: false, line, message: error.message.split('\n')[0] ?? error.message };
  }
  return { ok: true, manifest: document.toJS() };
}

/** The 1-based line of the YAML where a problem's path (`spec.inputs.0.dataset`, as the API
 * names it) is, or the line of the nearest part of it that is there: a missing field is
 * marked at its parent's key. A key may itself hold dots (a sweep's `config.train.lr`), so
 * segments that name no key are tried joined with the next. Null for an empty path or a
 * document that is not there. */
export function lineOfPath(text: string, path: string): number | null {
  if (path === '') return null;
  const lines = new LineCounter();
  const document = parseDocument(text, { lineCounter: lines });
  if (document.errors.length > 0) return null;
  const segments = path.split('.');
  let node: unknown = document.contents;
  let offset: number | null = null;
  let index = 0;
  while (index < segments.length) {
    const step = childOf(node, segments, index);
    if (!step) break;
    node = step.node;
    offset = step.offset;
    index += step.used;
  }
  return offset === null ? null : lines.linePos(offset).line;
}

function childOf(
  node: unknown,
  segments: string[],
  from: number,
): { node: unknown; offset: number; used: number } | null {
  if (isMap(node)) {
    for (let end = from + 1; end <= segments.length; end += 1) {
      const key = segments.slice(from, end).join('.');
      const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === key);
      const start = pair && (pair.key as YamlNode).range?.[0];
      if (pair && start !== undefined) return { node: pair.value, offset: start, used: end - from };
    }
    return null;
  }
  if (isSeq(node)) {
    const position = Number(segments[from]);
    const item = Number.isInteger(position) ? node.items[position] : undefined;
    const start = (item as YamlNode | undefined)?.range?.[0];
    return start === undefined ? null : { node: item, offset: start, used: 1 };
  }
  return null;
}

export type Endpoint = 'runs' | 'sweeps';

/** Where a manifest of this kind is submitted; a kind neither takes is the API's to name. */
export function endpointOf(manifest: unknown): Endpoint {
  const kind = typeof manifest === 'object' && manifest !== null ? (manifest as { kind?: unknown }).kind : undefined;
  return kind === 'Sweep' ? 'sweeps' : 'runs';
}

/** A run's name is a DNS label of at most 40 characters (domain/specs.py MAX_RUN_NAME). */
export const MAX_RUN_NAME = 40;

/** `<name>-2`, or the next number not in `taken`; a name already numbered counts on
 * (`sft-2` gives `sft-3`), and the name is shortened to keep within the limit. */
export function freeName(name: string, taken: ReadonlySet<string>, limit = MAX_RUN_NAME): string {
  const numbered = /^(.*)-(\d+)$/.exec(name);
  const base = numbered?.[1] || name;
  let number = numbered ? Number(numbered[2]) + 1 : 2;
  for (;;) {
    const suffix = `-${number}`;
    const candidate = base.slice(0, limit - suffix.length).replace(/-+$/, '') + suffix;
    if (!taken.has(candidate)) return candidate;
    number += 1;
  }
}

/** The manifest with `metadata.name` set, the rest as it was. */
export function renamed(manifest: Record<string, unknown>, name: string): Record<string, unknown> {
  const metadata = (manifest.metadata ?? {}) as Record<string, unknown>;
  return { ...manifest, metadata: { ...metadata, name } };
}
