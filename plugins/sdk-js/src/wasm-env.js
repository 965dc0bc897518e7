// Owns: the globals a plugin finds inside the component, set up before the author's module runs
// (the build tool puts this module first in the bundle). Only the Wasm build imports it:
// `diorch:plugins/*` specifiers exist only there.
// - the SDK's `log` goes to the host's `diorch:plugins/log@0.5.0` import;
// - `console` (which the QuickJS runtime lacks: using it would throw) writes to the same log;
// - the clock reads 0, as the host's deny-all WASI clocks do: with WASI stubbed, reading the
//   real clock (Date.now(), new Date(), performance.now()) would trap the component.

import host from "diorch:plugins/log@0.5.0";
import { log, setLogSink } from "./log.js";

setLogSink((level, message, fields) => host.log(level, message, fields));

function text(args) {
  return args
    .map((a) => {
      if (typeof a === "string") return a;
      try {
        return typeof a === "object" && a !== null && !(a instanceof Error) ? JSON.stringify(a) : String(a);
      } catch {
        return String(a);
      }
    })
    .join(" ");
}

globalThis.console = {
  log: (...args) => log.info(text(args)),
  info: (...args) => log.info(text(args)),
  debug: (...args) => log.debug(text(args)),
  trace: (...args) => log.trace(text(args)),
  warn: (...args) => log.warn(text(args)),
  error: (...args) => log.error(text(args)),
};

const RealDate = Date;
/** Date with the clock at 0: `new Date()` is the epoch, `Date()` its text. */
function FixedDate(...args) {
  if (new.target === undefined) return new RealDate(0).toString();
  return Reflect.construct(RealDate, args.length > 0 ? args : [0], new.target);
}
Object.setPrototypeOf(FixedDate, RealDate);
FixedDate.prototype = RealDate.prototype;
FixedDate.now = () => 0;
globalThis.Date = FixedDate;
// The runtime's `performance.now` is read-only: replace the whole object.
const performance = Object.create(globalThis.performance ?? null, { now: { value: () => 0 } });
Object.defineProperty(globalThis, "performance", { value: performance, writable: true, configurable: true });
