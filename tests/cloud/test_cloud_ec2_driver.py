"""The one place libcloud's EC2 driver is corrected must read real AWS answers and moto's alike."""

from __future__ import annotations

import pytest

from skyhive.providers.cloud.ec2_driver import make_driver, normalise_namespace, parse_errors

AWS_ERROR = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>InsufficientInstanceCapacity"
             "</Code><Message>We currently do not have sufficient p4d.24xlarge capacity in the Availability Zone you "
             "requested (us-east-1a).</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID>"
             "</Response>")  # the form AWS documents: no namespace
MOTO_ERROR = ('<?xml version="1.0" encoding="utf-8"?>\n<Response xmlns="http://ec2.amazonaws.com/doc/2016-11-15">'
              "<Errors><Error><Code>InvalidGroup.NotFound</Code><Message>The security group 'sg-1' does not exist"
              "</Message></Error></Errors><RequestID>request-id</RequestID></Response>")


def test_error_codes_are_read_from_aws_and_from_moto_bodies():
    assert parse_errors(AWS_ERROR) == [("InsufficientInstanceCapacity", "We currently do not have sufficient "
                                        "p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a).")]
    assert parse_errors(MOTO_ERROR) == [("InvalidGroup.NotFound", "The security group 'sg-1' does not exist")]
    assert parse_errors("not xml") == [] and parse_errors("<Response/>") == []


def test_the_namespace_gets_its_slash_once_and_a_slashed_one_is_left_alone():
    bare = '<R xmlns="http://ec2.amazonaws.com/doc/2016-11-15"><a/></R>'
    slashed = '<R xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><a/></R>'
    assert normalise_namespace(bare) == slashed
    assert normalise_namespace(slashed) == slashed
    other = '<R xmlns="http://example.com/doc/2016-11-15"/>'
    assert normalise_namespace(other) == other


def test_an_endpoint_points_the_driver_at_it_and_signs_with_sigv4():
    driver = make_driver(key="k", secret="s", region="us-west-2", endpoint="http://127.0.0.1:5000")
    assert (driver.connection.host, driver.connection.port, driver.connection.secure) == ("127.0.0.1", 5000, False)
    assert driver.signature_version == "4"
    aws = make_driver(key="k", secret="s", region="eu-west-1")
    assert aws.connection.host == "ec2.eu-west-1.amazonaws.com" and aws.connection.secure
    with pytest.raises(ValueError, match="endpoint must look like http://HOST:PORT"):
        make_driver(key="k", secret="s", region="us-east-1", endpoint="127.0.0.1:5000")
