//! The patch types a client may send (`PatchType`, from and to `Content-Type`) and why a patch is
//! refused (`PatchError`), with the Status code, reason and message the apiserver answers with.
//!
//! Data and its rendering only: must not apply patches.

use serde_json::Value;

/// The patch formats a client may name in `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    /// Maps a request `Content-Type` to a patch type. Like the apiserver, everything from the first
    /// `;` on (charset etc.) is ignored and the rest must match exactly.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = match ct.find(';') {
            Some(idx) if idx > 0 => &ct[..idx],
            _ => ct,
        };
        match base {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

/// Why a patch was refused. `Display` is the message a real apiserver puts in its Status (for
/// [`PatchError::Unprocessable`] the apiserver's own error, which it leaves out of the Status;
/// see [`PatchError::to_status`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 422, built by the apiserver with `NewGenericServerResponse`: the Status message is generic
    /// and this text is not in it (only logged).
    #[error("{0}")]
    Unprocessable(String),
    /// 413 RequestEntityTooLarge.
    #[error("Request entity too large: {0}")]
    TooLarge(String),
    /// 415 UnsupportedMediaType.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    /// A plain Go error the apiserver returns as 500 with reason Unknown.
    #[error("{0}")]
    Internal(String),
}

impl PatchError {
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable(_) => 422,
            PatchError::TooLarge(_) => 413,
            PatchError::UnsupportedMediaType(_) => 415,
            PatchError::Internal(_) => 500,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Unprocessable(_) => "Invalid",
            PatchError::TooLarge(_) => "RequestEntityTooLarge",
            PatchError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            PatchError::Internal(_) => "Unknown",
        }
    }

    /// The `message` of the Status object.
    pub fn status_message(&self) -> String {
        match self {
            PatchError::Unprocessable(_) => {
                "the server rejected our request due to an error in our request".to_string()
            }
            other => other.to_string(),
        }
    }

    /// The full `Status` object the apiserver answers with.
    pub fn to_status(&self) -> Value {
        let mut status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.status_message(),
            "reason": self.reason(),
            "code": self.status_code(),
        });
        // kube-apiserver builds this with NewGenericServerResponse(422, …, isUnexpectedResponse
        // false): the patch's own error is dropped, `details` stays empty.
        if let (PatchError::Unprocessable(_), Some(obj)) = (self, status.as_object_mut()) {
            obj.insert("details".to_string(), serde_json::json!({}));
        }
        status
    }
}
