//! `[[issuers]]` in a deployment file: read into the service's issuers
//! with their defaults (a file may have issuers and no keys), and each
//! mistake refused naming its field.

mod support;

use support::{CEDAR, POLICY, temp_path};
use toolgate_cedar::Mapping;
use toolgate_deploy::{BuiltIn, ConfigError, Deployment};

fn load(issuers: &str) -> Result<Deployment, ConfigError> {
    let dir = temp_path("issuers");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.toml"), POLICY).unwrap();
    let file = dir.join("toolgate.toml");
    std::fs::write(
        &file,
        format!("policy = \"policy.toml\"\napplication = \"app\"\n{issuers}"),
    )
    .unwrap();
    let app = BuiltIn {
        name: "app",
        policies: CEDAR.to_owned(),
        mapping: Mapping {
            principal_type: "Agent".into(),
            resource_type: "Order".into(),
            resource_field: "order_id".into(),
        },
    };
    Deployment::load(&file, &app)
}

const GOOD: &str = r#"
[[issuers]]
issuer = "https://id.example"
audience = "https://gate.example/mcp"
scopes = { refunds = ["refund:issue"] }
groups_claim = "groups"
groups = { support = ["credit:issue"] }
attributes = { team = "team", mail = "email" }
"#;

#[test]
fn an_issuer_is_read_with_its_defaults() {
    let Ok(d) = load(GOOD) else {
        panic!("the good file did not load")
    };
    let ids: Vec<&str> = d.service.issuers.identifiers().collect();
    assert_eq!(ids, ["https://id.example"]);
    // A file with neither keys nor issuers would refuse every request.
    let Err(e) = load("") else {
        panic!("a file nobody can call loaded")
    };
    assert_eq!(e.field(), "keys", "{e}");
    assert!(e.message().contains("no [[issuers]]"), "{e}");
}

#[test]
fn each_issuer_mistake_names_its_field() {
    let cases = [
        (
            GOOD.replace("https://id.example", "http://id.example"),
            "issuers[0].issuer",
            "https://",
        ),
        (
            GOOD.replace("audience = \"https://gate.example/mcp\"", "audience = \"\""),
            "issuers[0].audience",
            "public URL",
        ),
        (
            format!("{GOOD}algorithms = [\"HS256\"]\n"),
            "issuers",
            "asymmetric only",
        ),
        (
            format!("{GOOD}clock_skew_secs = 3600\n"),
            "issuers[0].clock_skew_secs",
            "at most 300",
        ),
        (
            format!("{GOOD}jwks_url = \"http://keys.example/jwks\"\n"),
            "issuers[0].jwks_url",
            "https://",
        ),
        (format!("{GOOD}{GOOD}"), "issuers", "named twice"),
        (
            GOOD.replace("mail = \"email\"", "mail = \"\""),
            "issuers[0].attributes",
            "both named",
        ),
        (
            GOOD.replace("refunds = [", "\"refunds now\" = ["),
            "issuers",
            "not an OAuth scope token",
        ),
    ];
    for (text, field, message) in cases {
        let Err(e) = load(&text) else {
            panic!("loaded: {text}")
        };
        assert_eq!(e.field(), field, "{e}");
        assert!(e.message().contains(message), "{e}");
    }
    // An unknown key is refused, not ignored.
    let Err(e) = load(&format!("{GOOD}secret = \"x\"\n")) else {
        panic!("an unknown key was ignored")
    };
    assert!(e.to_string().contains("secret"), "{e}");
    // Plain HTTP is fine on loopback (a local provider).
    assert!(load(&GOOD.replace("https://id.example", "http://127.0.0.1:9000")).is_ok());
}
