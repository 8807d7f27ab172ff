// Server-Sent Events over fetch rather than EventSource, because EventSource cannot send the
// Authorization header and the token must never go into a URL.

export interface SseMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/**
 * Feeds text as it arrives and hands back each complete message. Keeps the unfinished tail
 * between calls, since a network chunk can end anywhere, even inside a line.
 */
export class SseParser {
  private buffer = '';
  private id: string | undefined;
  private event = '';
  private data: string[] = [];

  push(text: string): SseMessage[] {
    this.buffer += text;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop() ?? '';
    const messages: SseMessage[] = [];
    for (const line of lines) {
      if (line === '') {
        if (this.data.length > 0) {
          messages.push({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
        }
        this.event = '';
        this.data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a comment: the server's keep-alive ping
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') this.data.push(value);
      else if (field === 'event') this.event = value;
      else if (field === 'id') this.id = value;
    }
    return messages;
  }
}

/** Reads an SSE body to its end, calling `onMessage` for each message. */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  onMessage: (message: SseMessage) => void,
): Promise<void> {
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const reader = body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    // stream: true holds back a multi-byte character split across chunks.
    for (const message of parser.push(decoder.decode(value, { stream: true }))) onMessage(message);
  }
}
