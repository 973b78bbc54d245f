# swverbs: SRQs through pyverbs (not part of rdma-core's suite; run by
# tests/compat/test_pyverbs_srq.sh next to rdma-core's own tests, whose helpers it uses).
import errno
import unittest

from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
import pyverbs.enums as e

from tests.base import RDMATestCase, RCResources, UDResources
import tests.utils as u


class SwvSrqTest(RDMATestCase):
    def setUp(self):
        super().setUp()
        self.iters = 50

    def create_players(self, resource, **resource_arg):
        self.client = resource(**self.dev_info, **resource_arg)
        self.server = resource(**self.dev_info, **resource_arg)
        self.client.pre_run(self.server.psns, self.server.qps_num)
        self.server.pre_run(self.client.psns, self.client.qps_num)
        self.traffic_args = {'client': self.client, 'server': self.server,
                             'iters': self.iters, 'gid_idx': self.gid_index,
                             'port': self.ib_port}

    def test_rc_srq_traffic(self):
        """RC traffic on 3 QP pairs, each side receiving through one SRQ."""
        self.create_players(RCResources, qp_count=3, with_srq=True)
        u.traffic(**self.traffic_args)

    def test_ud_srq_traffic(self):
        """UD traffic on 3 QP pairs, each side receiving through one SRQ."""
        self.create_players(UDResources, qp_count=3, with_srq=True)
        u.traffic(**self.traffic_args)

    def test_srq_attrs(self):
        """Create, query and modify an SRQ; refused arguments give EINVAL."""
        with Context(name=self.dev_name) as ctx, PD(ctx) as pd:
            srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=10, max_sge=2)))
            attr = srq.query()
            self.assertEqual(attr.max_wr, 10)
            self.assertEqual(attr.max_sge, 2)
            self.assertEqual(attr.srq_limit, 0)
            srq.modify(SrqAttr(srq_limit=5), e.IBV_SRQ_LIMIT)
            self.assertEqual(srq.query().srq_limit, 5)
            with self.assertRaises(PyverbsRDMAError) as ex:
                srq.modify(SrqAttr(srq_limit=11), e.IBV_SRQ_LIMIT)
            self.assertEqual(ex.exception.error_code, errno.EINVAL)
            srq.modify(SrqAttr(max_wr=20), e.IBV_SRQ_MAX_WR)
            self.assertEqual(srq.query().max_wr, 20)
            srq.close()
            with self.assertRaises(PyverbsRDMAError) as ex:
                SRQ(pd, SrqInitAttr(SrqAttr(max_wr=10, max_sge=33)))
            self.assertEqual(ex.exception.error_code, errno.EINVAL)
