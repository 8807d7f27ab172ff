import { describe, expect, it } from 'vitest';

import { readSse, SseParser } from './sse';

describe('SseParser', () => {
  it('joins a message split across chunks, even mid-line', () => {
    const parser = new SseParser();
    expect(parser.push('id: 7\nevent: pha')).toEqual([]);
    expect(parser.push('se\ndata: {"a":')).toEqual([]);
    expect(parser.push('1}\n\n')).toEqual([{ id: '7', event: 'phase', data: '{"a":1}' }]);
  });

  it('skips keep-alive comments and handles CRLF and multi-line data', () => {
    const parser = new SseParser();
    const messages = parser.push(': ping\r\n\r\ndata: one\r\ndata: two\r\n\r\n');
    expect(messages).toEqual([{ id: undefined, event: 'message', data: 'one\ntwo' }]);
  });

  it('keeps the last id for later messages without one', () => {
    const parser = new SseParser();
    parser.push('id: 3\ndata: x\n\n');
    expect(parser.push('data: y\n\n')[0]?.id).toBe('3');
  });
});

describe('readSse', () => {
  it('reads every message of a stream to its end', async () => {
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode('id: 1\nevent: a\ndata: 1\n\nid: 2\n'));
        controller.enqueue(encoder.encode('event: b\ndata: 2\n\n'));
        controller.close();
      },
    });
    const seen: string[] = [];
    await readSse(body, (message) => seen.push(`${message.id}:${message.event}:${message.data}`));
    expect(seen).toEqual(['1:a:1', '2:b:2']);
  });
});
