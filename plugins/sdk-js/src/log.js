// Owns: structured logging for plugin authors. The Wasm build binds the sink to the host's
// `diorch:plugins/log@0.5.0` import (see wasm-env.js); elsewhere (unit tests under Node) logging
// is a no-op unless a test installs a sink, as the Rust SDK's native build does.

let sink = null;

/** @internal Routes log lines to `fn(level, message, fields)`; null turns logging off. */
export function setLogSink(fn) {
  const previous = sink;
  sink = fn;
  return previous;
}

/** `{key: value}` (or `[[key, value]]`) as the WIT's list of string pairs. */
function pairs(fields) {
  if (fields == null) return [];
  const entries = Array.isArray(fields) ? fields : Object.entries(fields);
  return entries.map(([k, v]) => [String(k), String(v)]);
}

function emit(level, message, fields) {
  if (sink !== null) sink(level, String(message), pairs(fields));
}

/** `log.info("placed", {job: job.key})`: one line in the operator's log, tagged with the plugin. */
export const log = Object.freeze({
  trace: (message, fields = {}) => emit("trace", message, fields),
  debug: (message, fields = {}) => emit("debug", message, fields),
  info: (message, fields = {}) => emit("info", message, fields),
  warn: (message, fields = {}) => emit("warn", message, fields),
  error: (message, fields = {}) => emit("error", message, fields),
});
