"""Authentication, authorization and the security admission plugins of orch-apiserver."""
