//! `diorch crd`: the DIJob CustomResourceDefinition printed as YAML (`diorch crd | kubectl
//! apply -f -`).
//!
//! Owns: printing it. Must not touch: the CRD itself (`diorch_core::api::crd` makes it).

/// Prints the CRD to stdout.
pub fn run() -> anyhow::Result<()> {
    print!("{}", diorch_core::api::crd::dijob_crd_yaml()?);
    Ok(())
}
