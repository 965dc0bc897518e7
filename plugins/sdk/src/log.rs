//! Structured logging to the operator (`diorch:plugins/log`). A no-op when built natively, so
//! plugin logic stays unit-testable on the host.

pub use crate::policy_bindings::diorch::plugins::log::Level;

/// Logs `message` with `fields` as key/value pairs.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        crate::policy_bindings::diorch::plugins::log::log(level, message, &fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (level, message, fields);
}

pub fn info(message: &str, fields: &[(&str, &str)]) {
    log(Level::Info, message, fields);
}

pub fn warn(message: &str, fields: &[(&str, &str)]) {
    log(Level::Warn, message, fields);
}

pub fn debug(message: &str, fields: &[(&str, &str)]) {
    log(Level::Debug, message, fields);
}
