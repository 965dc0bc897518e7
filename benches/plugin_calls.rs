//! Placeholder: the plugin call benchmark lands in the next commit.

fn main() {}
