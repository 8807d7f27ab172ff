import { defineConfig } from 'vite';

// The dev server and `vite preview` forward /api to a running control plane, so the
// dashboard can be developed (and tested) without the API serving the built files.
const apiUrl = process.env.CRUCIBLE_API_URL ?? 'http://127.0.0.1:8080';
const proxy = { '/api': { target: apiUrl, changeOrigin: true } };

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
