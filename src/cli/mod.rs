//! The `diorch` command line: every subcommand's arguments, and what it prints for people.
//!
//! Owns: parsing and printing. Must not touch: decisions (they stay in the modules it calls);
//! no other module imports it (only the binary, `src/main.rs`).

pub mod plugin;
pub mod simulate;
