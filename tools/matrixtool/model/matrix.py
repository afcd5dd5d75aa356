"""The matrix (``matrix.yaml``): its values (``model``) and the reading and validation of the file
(``matrixfile``, ``yamlfile``), under the one name the rest of the tool imports them by."""

from __future__ import annotations

from matrixtool.model.matrixfile import (
    MAX_STRING_LENGTH,
    MAX_URL_LENGTH,
    SCHEMA_NAME,
    SIZE_UNITS,
    SUITE_PYTHON,
    load_matrix,
    load_schema,
    parse_size,
    resolve_checks,
    resolve_extends,
    url_problem,
    validate,
)
from matrixtool.model.model import (
    DEFAULT_MATRIX,
    REPO_ROOT,
    TEMPLATES_DIR_NAME,
    Accelerator,
    CheckSpec,
    IndexSettings,
    Matrix,
    PackagePin,
    Platform,
    TritonState,
    Variant,
)
from matrixtool.model.yamlfile import MAX_FILE_BYTES, MAX_YAML_NODES, parse_yaml, read_config_text

__all__ = [
    "DEFAULT_MATRIX",
    "MAX_FILE_BYTES",
    "MAX_STRING_LENGTH",
    "MAX_URL_LENGTH",
    "MAX_YAML_NODES",
    "REPO_ROOT",
    "SCHEMA_NAME",
    "SIZE_UNITS",
    "SUITE_PYTHON",
    "TEMPLATES_DIR_NAME",
    "Accelerator",
    "CheckSpec",
    "IndexSettings",
    "Matrix",
    "PackagePin",
    "Platform",
    "TritonState",
    "Variant",
    "load_matrix",
    "load_schema",
    "parse_size",
    "parse_yaml",
    "read_config_text",
    "resolve_checks",
    "resolve_extends",
    "url_problem",
    "validate",
]
