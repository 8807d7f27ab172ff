import { defineConfig, type ProxyOptions } from 'vite';

// The dev server and `vite preview` forward /api to a running control plane, so the
// dashboard can be developed (and tested) without the API serving the built files.
const apiUrl = process.env.CRUCIBLE_API_URL ?? 'http://127.0.0.1:8080';
const proxy: Record<string, ProxyOptions> = {
  '/api': {
    target: apiUrl,
    changeOrigin: true,
    configure(server) {
      // The proxy sends the response headers with the first body bytes, which for an event
      // stream with nothing new is the server's keep-alive 15 s later; send them now (once
      // the proxy has copied them, hence setImmediate) so the page knows it is connected.
      server.on('proxyRes', (upstream, _request, response) => {
        if (String(upstream.headers['content-type']).startsWith('text/event-stream')) {
          setImmediate(() => response.flushHeaders());
        }
      });
    },
  },
};

export default defineConfig({
  base: '/',
  server: { proxy },
  preview: { proxy },
  build: {
    outDir: 'dist',
    rollupOptions: {
      onwarn(warning, warn) {
        // TanStack Query marks its hooks "use client" for React Server Components; a
        // client-only bundle has nothing to preserve.
        if (warning.code === 'MODULE_LEVEL_DIRECTIVE') return;
        warn(warning);
      },
    },
  },
});
