"""The one-line sentence for Spark, Iceberg and JVM errors (``spark_error_sentence``)."""

from __future__ import annotations

from cdc_platform.spark import spark_error_sentence


class JavaThrowable:
    """Stands in for a py4j JavaObject of a java.lang.Throwable: toString and getCause."""

    def __init__(self, text: str, cause: JavaThrowable | None = None) -> None:
        self.text = text
        self.cause = cause

    def toString(self) -> str:
        return self.text

    def getCause(self) -> JavaThrowable | None:
        return self.cause


class JavaError(Exception):
    """Shaped as py4j's Py4JJavaError: its text names the call, java_exception the error."""

    def __init__(self, java: JavaThrowable) -> None:
        super().__init__("An error occurred while calling o10970.sql.\n: " + java.text)
        self.java_exception = java


def test_a_java_error_says_the_exception_not_the_py4j_call() -> None:
    conflict = JavaThrowable(
        "org.apache.iceberg.exceptions.ValidationException: Missing required files to delete"
    )
    sentence = spark_error_sentence(JavaError(conflict))
    assert sentence == (
        "org.apache.iceberg.exceptions.ValidationException: Missing required files to delete"
    )
    assert "o10970" not in sentence


def test_a_wrapped_java_error_names_its_root_cause() -> None:
    root = JavaThrowable(
        "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit:\nbase changed"
    )
    wrapper = JavaThrowable("java.lang.RuntimeException: rewrite failed", JavaThrowable("x", root))
    sentence = spark_error_sentence(JavaError(wrapper))
    assert sentence.startswith("java.lang.RuntimeException: rewrite failed (cause: ")
    assert "CommitFailedException: Cannot commit: base changed" in sentence
    assert "\n" not in sentence


class PySparkLike(Exception):
    def __init__(self, desc: str) -> None:
        super().__init__(desc)
        self.desc = desc


def test_a_pyspark_error_keeps_its_first_line_and_a_long_one_is_cut() -> None:
    assert spark_error_sentence(PySparkLike("[TABLE_OR_VIEW_NOT_FOUND] t\n== Plan ==\n...")) == (
        "[TABLE_OR_VIEW_NOT_FOUND] t"
    )
    assert len(spark_error_sentence(PySparkLike("x" * 1000))) == 400
    assert spark_error_sentence(PySparkLike("")) == "PySparkLike"
