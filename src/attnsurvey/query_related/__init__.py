"""§3.3 Query-related attention: types and multiplicity of queries."""
