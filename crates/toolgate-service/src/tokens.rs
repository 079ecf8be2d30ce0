//! Who a caller is when it presents a signed token: the deployment's token
//! issuers (`[[issuers]]`, docs/deploy.md), beside its API keys.
//!
//! A token is a JWT signed with an asymmetric key of an issuer the
//! deployment names. It is accepted only when all of these hold, in this
//! order, and refused with the first that does not ([`TokenError::code`]):
//!
//! 1. it is three base64url parts whose payload names an `iss` the
//!    deployment trusts (the payload is read unverified only to pick the
//!    issuer; everything below checks it again);
//! 2. its header's `alg` is one of that issuer's algorithms (asymmetric
//!    only: `HS*` and `none` are refused when the file is read, so a token
//!    signed with HMAC over the public key never verifies) and it names a
//!    `kid`;
//! 3. the key with that `kid` is in the issuer's JWKS: cached, fetched
//!    again for an unknown `kid` at most once per
//!    [`IssuerSettings::refetch_interval`], and with the JWKS unreachable a
//!    cached key still verifies while an unknown one is refused (fail
//!    closed);
//! 4. the signature verifies, `iss` and `aud` are the issuer's and the
//!    resource's, and `exp` (required) and `nbf` hold within the allowed
//!    clock skew;
//! 5. the principal claim (`sub` by default) is a string; the client claim
//!    (`azp`, then `client_id`) names what acted for it.
//!
//! The principal is the person (the claim's value), acting through the
//! client: [`Principal::via`] is the client id, as for a key that acts for
//! users. Capabilities come from the token's scopes (`scope`, `scp`) and
//! groups, through the issuer's tables; nothing else grants one. The
//! claims the issuer's `attributes` table names become the principal's
//! attributes for the authoriser (a team, groups, an email).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use toolgate::pipeline::Principal;

/// Largest JWKS or metadata document read, in bytes.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// How long a JWKS or metadata fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest token read, in bytes: a bearer header is bounded before this.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// One `[[issuers]]` entry, checked by the file's reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerSettings {
    /// The issuer identifier, compared with `iss` byte for byte.
    pub issuer: String,
    /// The audience a token must name in `aud`: this resource's public URL
    /// (RFC 8707).
    pub audience: String,
    /// Where the signing keys are; by default the `jwks_uri` of the
    /// issuer's metadata (`/.well-known/openid-configuration`, then
    /// `/.well-known/oauth-authorization-server`).
    pub jwks_url: Option<String>,
    /// Accepted `alg` values, asymmetric only ([`ALGORITHMS`]).
    pub algorithms: Vec<String>,
    /// Allowed clock skew for `exp` and `nbf`.
    pub clock_skew: Duration,
    /// The claim that names the person (`sub`).
    pub principal_claim: String,
    /// The claims that name the client or agent, first present wins
    /// (`azp`, `client_id`).
    pub client_claims: Vec<String>,
    /// OAuth scope → the capabilities it grants.
    pub scope_capabilities: BTreeMap<String, Vec<String>>,
    /// The claim that lists the person's groups, if any.
    pub groups_claim: Option<String>,
    /// Group → the capabilities it grants.
    pub group_capabilities: BTreeMap<String, Vec<String>>,
    /// Least time between two fetches of the JWKS for an unknown `kid`.
    pub refetch_interval: Duration,
    /// Principal attribute → the claim it is read from: the person's
    /// attributes as the authoriser sees them (Cedar's `principal.team`).
    /// A claim the token lacks, or holds as `null`, leaves the attribute
    /// out.
    pub attributes: BTreeMap<String, String>,
}

/// The `alg` values an issuer may accept: asymmetric signatures only.
pub const ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn algorithm(name: &str) -> Option<Algorithm> {
    Some(match name {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        _ => return None,
    })
}

/// Why a token was refused. Each is a `401`; [`TokenError::code`] is the
/// stable reason the log and the `WWW-Authenticate` description carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT (or `alg: none`, which no issuer accepts).
    #[error("malformed_token: {0}")]
    Malformed(String),
    /// An `iss` this deployment does not trust.
    #[error("unknown_issuer: {0:?} is not an issuer of this deployment")]
    UnknownIssuer(String),
    /// An `alg` the issuer does not accept.
    #[error("algorithm_not_allowed: {0}")]
    AlgorithmNotAllowed(String),
    /// A `kid` not in the issuer's keys, or no `kid`.
    #[error("unknown_key: {0}")]
    UnknownKey(String),
    /// The issuer's keys could not be fetched and none cached verifies.
    #[error("keys_unavailable: {0}")]
    KeysUnavailable(String),
    /// The signature, `iss`, `aud`, `exp` or `nbf` does not hold.
    #[error("invalid_token: {0}")]
    Invalid(String),
    /// No usable principal in the claims.
    #[error("no_principal: {0}")]
    NoPrincipal(String),
}

impl TokenError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed_token",
            Self::UnknownIssuer(_) => "unknown_issuer",
            Self::AlgorithmNotAllowed(_) => "algorithm_not_allowed",
            Self::UnknownKey(_) => "unknown_key",
            Self::KeysUnavailable(_) => "keys_unavailable",
            Self::Invalid(_) => "invalid_token",
            Self::NoPrincipal(_) => "no_principal",
        }
    }
}

/// A `[[issuers]]` entry that cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IssuerError(pub String);

/// The deployment's token issuers. Cheap to clone; empty by default (API
/// keys only).
#[derive(Clone, Default)]
pub struct Issuers {
    list: Arc<[Issuer]>,
}

impl std::fmt::Debug for Issuers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|i| &i.settings.issuer))
            .finish()
    }
}

struct Issuer {
    settings: IssuerSettings,
    algorithms: Vec<Algorithm>,
    http: reqwest::Client,
    // Held only to read or replace, never across a fetch: a slow JWKS must
    // not hold up tokens whose key is cached.
    keys: std::sync::Mutex<KeyCache>,
    // One fetch at a time; a caller that waited for one looks again before
    // starting its own.
    fetching: tokio::sync::Mutex<()>,
}

type Key = (DecodingKey, Option<Algorithm>);

#[derive(Default)]
struct KeyCache {
    keys: HashMap<String, Key>,
    fetched_at: Option<Instant>,
    /// Why the last fetch failed, until one succeeds: an unknown `kid`
    /// meanwhile is `keys_unavailable`, not `unknown_key`.
    failed: Option<String>,
}

impl Issuers {
    /// The issuers of `settings`, each checked: asymmetric algorithms
    /// only, an issuer and an audience, distinct issuers.
    pub fn new(settings: Vec<IssuerSettings>) -> Result<Self, IssuerError> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| IssuerError(format!("the issuers' HTTP client: {e}")))?;
        let mut list = Vec::with_capacity(settings.len());
        for s in settings {
            if s.issuer.is_empty() || s.audience.is_empty() {
                return Err(IssuerError(
                    "an issuer needs `issuer` and `audience`".into(),
                ));
            }
            if list.iter().any(|i: &Issuer| i.settings.issuer == s.issuer) {
                return Err(IssuerError(format!("issuer {:?} is named twice", s.issuer)));
            }
            let algorithms = s
                .algorithms
                .iter()
                .map(|a| {
                    algorithm(a).ok_or_else(|| {
                        IssuerError(format!(
                            "algorithm {a:?} is not accepted (asymmetric only: {})",
                            ALGORITHMS.join(", ")
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if algorithms.is_empty() {
                return Err(IssuerError("an issuer needs at least one algorithm".into()));
            }
            // A scope is written into a `WWW-Authenticate` challenge: only
            // RFC 6749's scope-token characters, so no quote can end it.
            if let Some(bad) = s.scope_capabilities.keys().find(|k| !is_scope_token(k)) {
                return Err(IssuerError(format!(
                    "scope {bad:?} is not an OAuth scope token (printable ASCII, no space, \
                     quote or backslash)"
                )));
            }
            list.push(Issuer {
                settings: s,
                algorithms,
                http: http.clone(),
                keys: std::sync::Mutex::new(KeyCache::default()),
                fetching: tokio::sync::Mutex::new(()),
            });
        }
        Ok(Self { list: list.into() })
    }

    /// Whether any issuer is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The issuers' identifiers, for a protected resource's metadata.
    pub fn identifiers(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|i| i.settings.issuer.as_str())
    }

    /// The OAuth scopes the issuers map to capabilities, for a protected
    /// resource's metadata (`scopes_supported`).
    pub fn scopes(&self) -> Vec<&str> {
        self.scopes_where(|_| true)
    }

    /// The OAuth scopes that grant `capability` at some issuer, for a
    /// step-up answer (`insufficient_scope`).
    pub fn scopes_granting(&self, capability: &str) -> Vec<&str> {
        self.scopes_where(|caps| caps.iter().any(|c| c == capability))
    }

    /// The issuers' scopes whose capabilities `grants` accepts, sorted, each
    /// once.
    fn scopes_where(&self, grants: impl Fn(&[String]) -> bool) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .list
            .iter()
            .flat_map(|i| i.settings.scope_capabilities.iter())
            .filter(|(_, caps)| grants(caps))
            .map(|(scope, _)| scope.as_str())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether `token` has a JWT's shape (three base64url parts): the
    /// doors ask an issuer only then, and a key's lookup otherwise.
    pub fn looks_like_token(token: &str) -> bool {
        let parts: Vec<&str> = token.split('.').collect();
        parts.len() == 3
            && parts.iter().all(|p| {
                !p.is_empty()
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
    }

    /// The principal `token` authenticates (the module's documentation),
    /// at the wall clock's time.
    pub async fn verify(&self, token: &str) -> Result<Principal, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed("longer than 16 KiB".into()));
        }
        let iss = unverified_issuer(token)?;
        let issuer = self
            .list
            .iter()
            .find(|i| i.settings.issuer == iss)
            .ok_or_else(|| TokenError::UnknownIssuer(iss.clone()))?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| TokenError::Malformed(format!("the header: {e}")))?;
        if !issuer.algorithms.contains(&header.alg) {
            return Err(TokenError::AlgorithmNotAllowed(format!(
                "{:?} is not among the issuer's {:?}",
                header.alg, issuer.settings.algorithms
            )));
        }
        let kid = header
            .kid
            .ok_or_else(|| TokenError::UnknownKey("the header names no kid".into()))?;
        let (key, key_alg) = issuer.key(&kid).await?;
        if key_alg.is_some_and(|a| a != header.alg) {
            return Err(TokenError::AlgorithmNotAllowed(format!(
                "key {kid:?} is for {key_alg:?}, the token says {:?}",
                header.alg
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&issuer.settings.issuer]);
        validation.set_audience(&[&issuer.settings.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = issuer.settings.clock_skew.as_secs();
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?;
        // Kept for an upstream that acts as the person (token exchange);
        // never printed or sent on as it is.
        Ok(issuer
            .principal(&data.claims)?
            .with_credential(toolgate::pipeline::Credential::new(token)))
    }
}

/// The `iss` of a token's payload, read without verifying anything: only
/// to pick the issuer whose keys then verify it.
fn unverified_issuer(token: &str) -> Result<String, TokenError> {
    let malformed = |why: &str| TokenError::Malformed(why.to_owned());
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| malformed("not a JWT"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| malformed("the payload is not base64url"))?;
    let claims =
        toolgate::decode::decode_strict(&bytes, &toolgate::decode::Limits::provider_body())
            .map_err(|e| TokenError::Malformed(format!("the payload: {e}")))?;
    match claims.get("iss") {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(malformed("the payload names no `iss`")),
    }
}

impl Issuer {
    fn cache(&self) -> std::sync::MutexGuard<'_, KeyCache> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The key `kid`, from the cache or a fetch the rate limit allows.
    async fn key(&self, kid: &str) -> Result<Key, TokenError> {
        if let Some(found) = self.cache().keys.get(kid) {
            return Ok(found.clone());
        }
        let _one_fetch = self.fetching.lock().await;
        {
            let mut cache = self.cache();
            if let Some(found) = cache.keys.get(kid) {
                return Ok(found.clone());
            }
            let due = cache
                .fetched_at
                .is_none_or(|at| at.elapsed() >= self.settings.refetch_interval);
            if !due {
                let every = self.settings.refetch_interval.as_secs();
                return Err(match &cache.failed {
                    Some(e) => TokenError::KeysUnavailable(format!(
                        "{e} (fetched again at most every {every} s)"
                    )),
                    None => TokenError::UnknownKey(format!(
                        "no key {kid:?} in the issuer's keys (fetched again at most every \
                         {every} s)"
                    )),
                });
            }
            cache.fetched_at = Some(Instant::now());
        }
        let fetched = self.fetch_keys().await;
        let mut cache = self.cache();
        match fetched {
            // Keys no longer published are dropped: a rotated-out key stops
            // verifying once the JWKS is read again.
            Ok(keys) => {
                cache.keys = keys;
                cache.failed = None;
            }
            // The cached keys stay: they still verify while it is down.
            Err(e) => {
                tracing::warn!(issuer = %self.settings.issuer, error = %e, "fetching the issuer's keys");
                cache.failed = Some(e.clone());
                return Err(TokenError::KeysUnavailable(e));
            }
        }
        cache
            .keys
            .get(kid)
            .cloned()
            .ok_or_else(|| TokenError::UnknownKey(format!("no key {kid:?} in the issuer's keys")))
    }

    async fn fetch_keys(&self) -> Result<HashMap<String, Key>, String> {
        let url = match &self.settings.jwks_url {
            Some(u) => u.clone(),
            None => self.discover_jwks_url().await?,
        };
        let set: JwkSet = serde_json::from_value(self.get_json(&url).await?)
            .map_err(|e| format!("{url}: not a JWKS: {e}"))?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let Some(kid) = jwk.common.key_id.clone() else {
                continue;
            };
            // A key for encryption, or of a kind no accepted algorithm
            // verifies with, is left out rather than failing the set.
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| algorithm(&format!("{a:?}")));
            keys.insert(kid, (key, alg));
        }
        Ok(keys)
    }

    async fn discover_jwks_url(&self) -> Result<String, String> {
        let base = self.settings.issuer.trim_end_matches('/');
        let mut last = String::new();
        for path in [
            "/.well-known/openid-configuration",
            "/.well-known/oauth-authorization-server",
        ] {
            match self.get_json(&format!("{base}{path}")).await {
                Ok(meta) => {
                    return match meta.get("jwks_uri") {
                        Some(Value::String(u)) => Ok(u.clone()),
                        _ => Err(format!("{base}{path} names no jwks_uri")),
                    };
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// A JSON document, its size bounded while it is read.
    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let mut resp = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        let limits = toolgate::decode::Limits::provider_body().with_max_bytes(MAX_DOCUMENT_BYTES);
        toolgate::decode::decode_strict(&body, &limits).map_err(|e| format!("{url}: {e}"))
    }

    /// The person, acting through the client the token names, with the
    /// capabilities its scopes and groups grant.
    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, TokenError> {
        let s = &self.settings;
        let person = match claims.get(&s.principal_claim) {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            _ => {
                return Err(TokenError::NoPrincipal(format!(
                    "the claim `{}` is not a string",
                    s.principal_claim
                )));
            }
        };
        let mut capabilities = Vec::new();
        for scope in strings(claims.get("scope")).chain(strings(claims.get("scp"))) {
            capabilities.extend(
                s.scope_capabilities
                    .get(&scope)
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        if let Some(claim) = &s.groups_claim {
            for group in strings(claims.get(claim)) {
                capabilities.extend(
                    s.group_capabilities
                        .get(&group)
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
        }
        let client = s.client_claims.iter().find_map(|c| match claims.get(c) {
            Some(Value::String(id)) if !id.is_empty() && *id != person => Some(id.clone()),
            _ => None,
        });
        let bad = |e: toolgate::pipeline::PrincipalError| TokenError::NoPrincipal(e.to_string());
        let principal = match client {
            Some(client) => Principal::new(client, capabilities)
                .map_err(bad)?
                .acting_for(person)
                .map_err(bad)?,
            None => Principal::new(person, capabilities).map_err(bad)?,
        };
        let attributes = s
            .attributes
            .iter()
            .filter_map(|(name, claim)| match claims.get(claim) {
                None | Some(Value::Null) => None,
                Some(v) => Some((name.clone(), v.clone())),
            })
            .collect();
        Ok(principal.with_attributes(attributes))
    }
}

/// RFC 6749 §3.3's `scope-token`: `%x21 / %x23-5B / %x5D-7E`, at least one.
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// A claim's strings: a space-separated string (`scope`) or an array.
fn strings(v: Option<&Value>) -> Box<dyn Iterator<Item = String> + '_> {
    match v {
        Some(Value::String(s)) => {
            Box::new(s.split(' ').filter(|x| !x.is_empty()).map(str::to_owned))
        }
        Some(Value::Array(a)) => Box::new(a.iter().filter_map(|x| x.as_str().map(str::to_owned))),
        _ => Box::new(std::iter::empty()),
    }
}
