//! TokenReview and SubjectAccessReview for the sandbox, decided from a static, documented file
//! (`diorch-sandbox serve --auth-file`), so that clients doing delegated authentication and
//! authorization (the replica API's `--server-auth kubernetes`) can be tested end to end.
//!
//! Owns only these two review answers; the sandbox itself still authenticates nobody.
//!
//! File format (YAML):
//! ```yaml
//! tokens:                      # bearer tokens TokenReview accepts
//! - {token: alice-token, user: alice, groups: [team-a]}
//! rules:                       # what SubjectAccessReview allows; anything else is denied
//! - user: alice                # or `group: team-a`
//!   namespaces: [default]      # omitted or empty: every namespace
//!   verbs: [get, update]       # `*`: every verb
//!   resources: [dijobs/replicas]   # `resource` or `resource/subresource`; `*`: every one
//! - user: prometheus           # a non-resource rule: `get` on a path, as RBAC's
//!   verbs: [get]               # nonResourceURLs (`*` there: every path)
//!   nonResourceURLs: [/metrics]
//! ```

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub token: String,
    pub user: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

impl AuthConfig {
    /// Reads the file; the error says what is wrong with it.
    pub fn load(path: &Path) -> Result<AuthConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read auth file {}: {e}", path.display()))?;
        serde_saphyr::from_str(&text)
            .map_err(|e| format!("auth file {} is not valid: {e}", path.display()))
    }

    /// The TokenReview `review` with its status filled in.
    pub fn token_review(&self, review: &Value) -> Value {
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let status = match self
            .tokens
            .iter()
            .find(|t| !token.is_empty() && t.token == token)
        {
            Some(t) => {
                json!({"authenticated": true, "user": {"username": t.user, "groups": t.groups}})
            }
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        answer(review, "authentication.k8s.io/v1", "TokenReview", status)
    }

    /// The SubjectAccessReview `review` with its status filled in.
    pub fn access_review(&self, review: &Value) -> Value {
        let spec = &review["spec"];
        let user = spec["user"].as_str().unwrap_or_default();
        let groups: Vec<&str> = spec["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let attrs = &spec["resourceAttributes"];
        // A request for a path (`/metrics`) carries nonResourceAttributes instead, matched
        // only by nonResourceURLs rules, as RBAC does.
        let path = spec["nonResourceAttributes"]["path"].as_str();
        let namespace = attrs["namespace"].as_str().unwrap_or_default();
        let verb = match path {
            Some(_) => spec["nonResourceAttributes"]["verb"].as_str(),
            None => attrs["verb"].as_str(),
        }
        .unwrap_or_default();
        let resource = match (
            path,
            attrs["subresource"].as_str().filter(|s| !s.is_empty()),
        ) {
            (Some(path), _) => path.to_string(),
            (None, Some(sub)) => {
                format!("{}/{sub}", attrs["resource"].as_str().unwrap_or_default())
            }
            (None, None) => attrs["resource"].as_str().unwrap_or_default().to_string(),
        };
        let allowed = self.rules.iter().find(|rule| {
            let who = rule.user.as_deref().is_some_and(|u| u == user)
                || rule.group.as_deref().is_some_and(|g| groups.contains(&g));
            let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
            let what = match path {
                Some(_) => any(&rule.non_resource_urls, &resource),
                None => {
                    (rule.namespaces.is_empty() || any(&rule.namespaces, namespace))
                        && any(&rule.resources, &resource)
                }
            };
            who && any(&rule.verbs, verb) && what
        });
        let status = match allowed {
            Some(_) => json!({"allowed": true, "reason": "allowed by the sandbox auth file"}),
            None => {
                json!({"allowed": false, "reason": format!("no rule of the sandbox auth file lets {user} {verb} {resource} in namespace {namespace:?}")})
            }
        };
        answer(
            review,
            "authorization.k8s.io/v1",
            "SubjectAccessReview",
            status,
        )
    }
}

fn answer(review: &Value, api_version: &str, kind: &str, status: Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"creationTimestamp": null},
        "spec": review["spec"],
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthConfig {
        serde_saphyr::from_str(
            "tokens:\n- {token: alice-token, user: alice, groups: [team-a]}\nrules:\n- {user: alice, namespaces: [default], verbs: [get], resources: [dijobs/replicas]}\n- {group: team-a, verbs: ['*'], resources: ['*'], namespaces: [lab]}\n- {user: prom, verbs: [get], nonResourceURLs: [/metrics]}\n",
        )
        .expect("config")
    }

    fn sar(user: &str, groups: &[&str], ns: &str, verb: &str) -> Value {
        json!({"spec": {"user": user, "groups": groups, "resourceAttributes": {
            "namespace": ns, "verb": verb, "group": "diengine.opendilab.org", "resource": "dijobs", "subresource": "replicas"}}})
    }

    #[test]
    fn tokens_authenticate_their_user_and_nothing_else() {
        let c = config();
        let ok = c.token_review(&json!({"spec": {"token": "alice-token"}}));
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(ok["status"]["user"]["username"], "alice");
        assert_eq!(ok["kind"], "TokenReview");
        for token in ["bob-token", ""] {
            let no = c.token_review(&json!({"spec": {"token": token}}));
            assert_eq!(no["status"]["authenticated"], false, "{token:?}");
        }
    }

    #[test]
    fn access_is_what_a_rule_allows() {
        let c = config();
        assert_eq!(
            c.access_review(&sar("alice", &[], "default", "get"))["status"]["allowed"],
            true
        );
        assert_eq!(
            c.access_review(&sar("alice", &[], "default", "update"))["status"]["allowed"],
            false
        );
        assert_eq!(
            c.access_review(&sar("alice", &[], "other", "get"))["status"]["allowed"],
            false
        );
        assert_eq!(
            c.access_review(&sar("bob", &["team-a"], "lab", "update"))["status"]["allowed"],
            true
        );
        let denied = c.access_review(&sar("bob", &[], "lab", "update"));
        assert_eq!(denied["status"]["allowed"], false);
        assert!(
            denied["status"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("bob update dijobs/replicas"))
        );
        assert!(
            AuthConfig::default().access_review(&sar("alice", &[], "default", "get"))["status"]["allowed"]
                == false
        );
    }

    /// Paths are matched by nonResourceURLs rules only, as RBAC does: a resource rule with
    /// `*` does not open `/metrics`, and a path rule opens nothing else.
    #[test]
    fn paths_are_allowed_by_non_resource_rules_only() {
        let c = config();
        let path = |user: &str, groups: &[&str], verb: &str, path: &str| {
            c.access_review(&json!({"spec": {"user": user, "groups": groups,
                "nonResourceAttributes": {"path": path, "verb": verb}}}))["status"]["allowed"]
                .clone()
        };
        assert_eq!(path("prom", &[], "get", "/metrics"), true);
        assert_eq!(path("prom", &[], "post", "/metrics"), false);
        assert_eq!(path("prom", &[], "get", "/plugins"), false);
        assert_eq!(
            path("bob", &["team-a"], "get", "/metrics"),
            false,
            "resources: ['*']"
        );
        assert_eq!(
            c.access_review(&sar("prom", &[], "default", "get"))["status"]["allowed"],
            false
        );
    }
}
