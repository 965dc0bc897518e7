//! The `diorch` command line: every subcommand's arguments, and what it prints for people.
//!
//! Owns: parsing and printing. Must not touch: decisions (they stay in the modules it calls);
//! no other module imports it (only the binary, `src/main.rs`).

/// Prints a line to stdout, ignoring a closed stdout (a pipe whose reader went away must not
/// panic the process, as `println!` would).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod plugin;
pub mod simulate;
pub mod webhook_cert;
