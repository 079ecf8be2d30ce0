//! Hand-written OpenAPI schemas and parameters the derives cannot state:
//! scope values, strict JSON, hex tokens, the claim key path.

use super::*;

/// `response`: the provider's body as JSON, or as a string holding it.
pub(super) fn response_schema() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(strict_object().description(Some("the provider's response body as JSON")))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(
                    "the provider's response body byte for byte (required for a stream)",
                )),
        )
        .into()
}

/// Characters no identifier may hold: `char::is_control`, the C0 and C1
/// controls.
pub(crate) const NO_CONTROL: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

/// The interoperable integer range every client number is held to.
pub(super) fn integer_bound() -> i64 {
    i64::try_from(toolgate::decode::Limits::INTEROPERABLE_INTEGER).unwrap_or(i64::MAX)
}

/// One scope value: a string of 1 to 256 bytes without control
/// characters, or an integer (`bounded_scope_value`).
pub(crate) fn scope_value_schema() -> RefOr<Schema> {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(toolgate::op::scope::MAX_SCOPE_STRING_BYTES))
                .pattern(Some(NO_CONTROL))
                .description(Some(
                    "1 to 256 bytes of UTF-8 without control characters (maxLength counts \
                     characters: non-ASCII text reaches the limit sooner)",
                )),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(-integer_bound()))
                .maximum(Some(integer_bound())),
        )
        .into()
}

/// `scope`: field names to bounded strings or integers. The served
/// document names the deployment's fields (`openapi::name_scope_fields`).
pub(super) fn scope_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Object))
        .additional_properties(Some(AdditionalProperties::RefOr(scope_value_schema())))
        .into()
}

/// `one_of` with the array and object branches of a recursive value: each
/// element or member is again the schema `name`.
fn with_containers(one_of: OneOfBuilder, name: &str) -> OneOfBuilder {
    let nested = || RefOr::Ref(utoipa::openapi::Ref::from_schema_name(name));
    one_of
        .item(utoipa::openapi::schema::ArrayBuilder::new().items(nested()))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .additional_properties(Some(AdditionalProperties::RefOr(nested()))),
        )
}

/// An attribute of an application-sent entity: strings, booleans,
/// integers, and arrays and objects of those (Cedar's attribute values).
pub struct EntityValue;

impl utoipa::PartialSchema for EntityValue {
    fn schema() -> RefOr<Schema> {
        let scalars = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Boolean))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(-integer_bound()))
                    .maximum(Some(integer_bound())),
            );
        with_containers(scalars, "EntityValue")
            .description(Some(
                "An entity attribute: a string, boolean or integer, or an array or object of \
                 those, nested at most 8 deep",
            ))
            .into()
    }
}

impl ToSchema for EntityValue {}

/// A string schema that is one of `names`: the wire enums whose values
/// come from a core type's stable names (`Provider::ALL`, the envelope
/// modes), so the document lists exactly what the server parses.
pub(super) fn names_schema(
    names: impl IntoIterator<Item = &'static str>,
    nullable: bool,
    description: &str,
) -> RefOr<Schema> {
    let ty = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::Type(Type::String)
    };
    let mut values: Vec<serde_json::Value> = names.into_iter().map(Into::into).collect();
    if nullable {
        values.push(serde_json::Value::Null);
    }
    ObjectBuilder::new()
        .schema_type(ty)
        .enum_values(Some(values))
        .description(Some(description))
        .into()
}

/// `provider`: the name of one of [`Provider::ALL`].
pub(super) fn provider_schema() -> RefOr<Schema> {
    names_schema(
        Provider::ALL.map(Provider::as_str),
        false,
        "The provider whose response shape `response` has.",
    )
}

/// The envelope modes a request may name, by their stable names.
pub const ENVELOPE_MODES: [EnvelopeMode; 2] = [EnvelopeMode::Native, EnvelopeMode::Structured];

/// `envelope`: one of [`ENVELOPE_MODES`], or null for the default.
pub(super) fn envelope_schema() -> RefOr<Schema> {
    names_schema(
        ENVELOPE_MODES.map(EnvelopeMode::as_str),
        true,
        "`native` (default) or `structured`.",
    )
}

pub(super) fn entities_schema() -> RefOr<Schema> {
    let entity = ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Object))
        .property(
            "id",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(128))
                .pattern(Some(NO_CONTROL)),
        )
        .required("id")
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::Ref(
            utoipa::openapi::Ref::from_schema_name("EntityValue"),
        ))))
        .description(Some(
            "The entity id (1 to 128 bytes without control characters), and its attributes",
        ));
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Object))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(128))
                .pattern(Some("^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$")),
        ))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(Schema::Object(
            entity.build(),
        )))))
        .into()
}

/// Any JSON value a client sends (a result, a receipt, a provider body as
/// JSON): what the strict decoder takes, which refuses integers beyond
/// ±(2^53−1) wherever they are nested (`number_out_of_range`). A
/// component of its own, since arrays and objects hold it again.
pub struct StrictJson;

impl utoipa::PartialSchema for StrictJson {
    fn schema() -> RefOr<Schema> {
        let bound = integer_bound();
        let scalars = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .item(ObjectBuilder::new().schema_type(Type::Boolean))
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Number)
                    .minimum(Some(-bound))
                    .maximum(Some(bound)),
            );
        with_containers(scalars, "StrictJson")
            .description(Some(
                "Any JSON value, numbers within ±(2^53−1): a larger integer is refused as \
                 `number_out_of_range` wherever it is nested (a float beyond it is read, but \
                 nothing here needs one)",
            ))
            .into()
    }
}

impl ToSchema for StrictJson {}

/// A JSON object whose members are [`StrictJson`].
pub(super) fn strict_object() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::Ref(
            utoipa::openapi::Ref::from_schema_name("StrictJson"),
        ))))
}

/// A [`StrictJson`] value.
pub(super) fn strict_json() -> RefOr<Schema> {
    RefOr::Ref(utoipa::openapi::Ref::from_schema_name("StrictJson"))
}

/// An identifier of `bytes` bytes written in hex (either case), as the
/// core's identifiers parse: the exact length and alphabet are in the
/// schema, so a client generated from the document cannot send a key or
/// token the server refuses for its shape.
pub(super) fn hex_schema(bytes: usize, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(format!("^[0-9a-fA-F]{{{}}}$", bytes * 2)))
        .min_length(Some(bytes * 2))
        .max_length(Some(bytes * 2))
        .description(Some(description))
}

/// An operation key: [`OperationKey::LEN`] bytes in hex.
pub(super) fn operation_key_schema() -> ObjectBuilder {
    hex_schema(
        OperationKey::LEN,
        "the operation key: 64 hexadecimal digits (either case)",
    )
}

/// A holder token: [`HolderToken::LEN`] bytes in hex.
pub(super) fn holder_schema() -> ObjectBuilder {
    hex_schema(
        HolderToken::LEN,
        "the permit's holder token: 32 hexadecimal digits (either case)",
    )
}

/// The `{key}` path parameter of the claim endpoints (for the document;
/// the handlers read the segment as text and parse it).
pub struct ClaimKeyPath;

impl IntoParams for ClaimKeyPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![param(
            "key",
            ParameterIn::Path,
            true,
            "the operation key (64 hexadecimal digits, either case)",
            operation_key_schema(),
        )]
    }
}

/// One parameter of the document, with a schema made from the types.
pub(crate) fn param(
    name: &str,
    place: ParameterIn,
    required: bool,
    description: &str,
    schema: ObjectBuilder,
) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(place)
        .required(if required {
            Required::True
        } else {
            Required::False
        })
        .description(Some(description))
        .schema(Some(schema))
        .build()
}
