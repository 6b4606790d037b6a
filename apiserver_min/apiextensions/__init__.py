"""Custom resources: definitions (CustomResourceDefinition), their schemas, and the
kinds they define, served through the generic store while the definition lasts."""
