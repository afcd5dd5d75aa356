"""The supply chain: SBOMs, the audit, signatures, provenance, static checks, attestations, image diffs."""
