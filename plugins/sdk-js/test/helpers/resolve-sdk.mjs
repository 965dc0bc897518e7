// Owns: a module resolve hook for the tests: `@diorch/plugin-sdk` (what the examples import, as
// a plugin project would after `npm install`) resolves to this SDK's sources, with no install.

const SDK = new URL("../../src/index.js", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier === "@diorch/plugin-sdk") return { url: SDK, shortCircuit: true };
  return next(specifier, context);
}
