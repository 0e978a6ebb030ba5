// Builds the UI into the Python package, where `hyperscope ui` serves it: index.html at /, assets
// under /assets/. Everything is bundled: the UI works offline (no CDN, no web fonts).
import { defineConfig } from "vite";

export default defineConfig({
  base: "/",
  build: {
    outDir: "../src/hyperscope/server/static",
    emptyOutDir: true,
    assetsDir: "assets",
    chunkSizeWarningLimit: 1200,
    sourcemap: false,
  },
  server: {
    proxy: { "/api": process.env.HYPERSCOPE_API ?? "http://127.0.0.1:8765" },
  },
});
