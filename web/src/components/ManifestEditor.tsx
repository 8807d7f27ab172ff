import { yaml } from '@codemirror/lang-yaml';
import { lintGutter, setDiagnostics, type Diagnostic } from '@codemirror/lint';
import { EditorView } from '@codemirror/view';
import { basicSetup } from 'codemirror';
import { useEffect, useRef } from 'react';

/** A problem to mark in the editor, at a 1-based line. */
export interface LineMark {
  line: number;
  message: string;
}

/** A CodeMirror YAML editor. It owns its text once started from `initial` (remount it, by
 * key, to start again) and reports each change; `marks` underline lines and put a dot in
 * the gutter with the message on hover. */
export function ManifestEditor({
  initial,
  onChange,
  marks,
  label,
}: {
  initial: string;
  onChange: (text: string) => void;
  marks: LineMark[];
  label: string;
}) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  // The latest callback, so the editor, built once, never calls a stale one.
  const report = useRef(onChange);
  useEffect(() => {
    report.current = onChange;
  }, [onChange]);

  useEffect(() => {
    if (!host.current) return;
    const editor = new EditorView({
      parent: host.current,
      doc: initial,
      extensions: [
        basicSetup,
        yaml(),
        lintGutter(),
        EditorView.contentAttributes.of({ 'aria-label': label }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) report.current(update.state.doc.toString());
        }),
      ],
    });
    view.current = editor;
    return () => {
      editor.destroy();
      view.current = null;
    };
  }, [initial, label]);

  useEffect(() => {
    const editor = view.current;
    if (!editor) return;
    const { doc } = editor.state;
    const diagnostics: Diagnostic[] = marks
      .filter((mark) => mark.line >= 1 && mark.line <= doc.lines)
      .map((mark) => {
        const line = doc.line(mark.line);
        return { from: line.from, to: line.to, severity: 'error', message: mark.message };
      });
    editor.dispatch(setDiagnostics(editor.state, diagnostics));
  }, [marks]);

  return <div className="manifest-editor" ref={host} />;
}
