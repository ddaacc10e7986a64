//! Validation of the webhook routes' query strings
//! (`GET /api/v1/webhooks?app`, `GET /api/v1/webhooks/{id}/deliveries`).

use super::query::Params;
use crate::error::ApiError;
use crate::store::webhooks::DeliveryState;

/// Most deliveries one page holds.
pub const MAX_PAGE: u32 = 500;

/// A page of the delivery log asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveriesQuery {
    pub state: Option<DeliveryState>,
    /// Deliveries below this id (the previous page's `next`).
    pub before: Option<u64>,
    pub limit: u32,
}

fn invalid(m: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_query", m)
}

/// `?app=` of the endpoint list (admin keys only use it).
pub fn parse_webhooks_list(query: Option<&str>) -> Result<Option<String>, ApiError> {
    Ok(Params::parse(query, &["app"])?
        .get("app")
        .map(str::to_owned))
}

/// `?state&before&limit` of the delivery log.
pub fn parse_deliveries(query: Option<&str>) -> Result<DeliveriesQuery, ApiError> {
    let p = Params::parse(query, &["state", "before", "limit"])?;
    let state = p
        .get("state")
        .map(|v| {
            DeliveryState::parse(v)
                .ok_or_else(|| invalid("state must be pending, delivered or dead"))
        })
        .transpose()?;
    let before = p
        .get("before")
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| invalid("before must be a delivery id"))
        })
        .transpose()?;
    let limit = match p.get("limit") {
        None => 50,
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| invalid(format!("limit must be 1-{MAX_PAGE}")))?,
    };
    Ok(DeliveriesQuery {
        state,
        before,
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        assert_eq!(
            parse_deliveries(Some("state=dead&before=812&limit=10")).unwrap(),
            DeliveriesQuery {
                state: Some(DeliveryState::Dead),
                before: Some(812),
                limit: 10
            }
        );
        assert_eq!(parse_deliveries(None).unwrap().limit, 50);
        for q in [
            "state=gone",
            "before=x",
            "limit=0",
            "limit=501",
            "page=2",
            "limit=1&limit=2",
        ] {
            assert_eq!(
                parse_deliveries(Some(q)).unwrap_err().kind,
                "invalid_query",
                "{q}"
            );
        }
        assert_eq!(
            parse_webhooks_list(Some("app=shop")).unwrap().as_deref(),
            Some("shop")
        );
        assert_eq!(
            parse_webhooks_list(Some("x=1")).unwrap_err().kind,
            "invalid_query"
        );
    }
}
