//! Property tests: every parser of text a client sends the sandbox (selectors, durations in
//! annotations, quantities, format checks in `schema/formats.rs`) answers any Unicode string with a
//! value or an error, never a panic. Strings are drawn both from all of Unicode and from each
//! parser's own alphabet mixed with multi-byte characters, so the deeper branches are reached.

use proptest::prelude::*;

use super::selector::{FieldSelector, LabelSelector};
use super::sim_pod::parse_duration;
use diorch_core::resources::parse_quantity;

/// Text near a grammar: its own characters, with multi-byte ones mixed in.
fn near(alphabet: &'static str) -> impl Strategy<Value = String> {
    let chars: Vec<char> = alphabet
        .chars()
        .chain(['é', 'µ', '中', '😀', '\u{0301}'])
        .collect();
    proptest::collection::vec(proptest::sample::select(chars), 0..40)
        .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn label_selectors(s in prop_oneof!["\\PC{0,40}", near("ab=!,() inotexs-_./\\")]) {
        if let Ok(sel) = LabelSelector::parse(&s) {
            // A parsed selector can be used.
            let _ = sel.matches(&serde_json::Map::new());
        }
    }

    #[test]
    fn field_selectors(s in prop_oneof!["\\PC{0,40}", near("metadata.namespace=!,\\ab")]) {
        if let Ok(sel) = FieldSelector::parse(&s) {
            let _ = sel.fields();
        }
    }

    #[test]
    fn durations(s in prop_oneof!["\\PC{0,20}", near("0123456789.hmsuµn ")]) {
        let _ = parse_duration(&s);
    }

    #[test]
    fn quantities(s in prop_oneof!["\\PC{0,20}", near("0123456789.+-eEkMGTPmunKi")]) {
        let _ = parse_quantity(&s);
    }
}
