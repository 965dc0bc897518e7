// Owns: the errors a plugin throws to refuse (NoFit, InvalidInput) and their translation into
// the WIT `error` variant. componentize-qjs maps a top-level `result<T, error>` to "return T or
// throw the variant", a variant being `{tag, val}` with the case name in kebab-case; any other
// thrown value makes the component trap. So every export catches everything and throws a
// variant.

/** The job does not fit on the given nodes (WIT `no-fit`). */
export class NoFit extends Error {
  constructor(message) {
    super(message);
    this.name = "NoFit";
  }
}

/** The input makes no sense to the plugin (WIT `invalid-input`). */
export class InvalidInput extends Error {
  constructor(message) {
    super(message);
    this.name = "InvalidInput";
  }
}

/** `String(value)` that cannot itself throw (a Symbol, a broken toString). */
function describe(value) {
  try {
    return String(value);
  } catch {
    return "a value that cannot be printed was thrown";
  }
}

/**
 * The WIT `error` variant for anything thrown: NoFit and InvalidInput keep their message; a
 * plain Error becomes `internal` with its message, another Error with `Name: message` (its
 * toString, so a TypeError says so), any other value with String(value).
 */
export function toWitError(e) {
  if (e instanceof NoFit) return { tag: "no-fit", val: describe(e.message) };
  if (e instanceof InvalidInput) return { tag: "invalid-input", val: describe(e.message) };
  if (e instanceof Error && e.constructor === Error) return { tag: "internal", val: describe(e.message) };
  return { tag: "internal", val: describe(e) };
}

/** Runs `body`, turning whatever it throws into the WIT error variant. */
export function guarded(body) {
  try {
    return body();
  } catch (e) {
    throw toWitError(e);
  }
}
