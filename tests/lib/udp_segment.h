/*
 * Sending a GSO (UDP_SEGMENT) burst from a plain UDP socket, as a hostile or
 * foreign sender would: the tests of the receive path's segment bounds.
 */
#ifndef SWV_TEST_UDP_SEGMENT_H
#define SWV_TEST_UDP_SEGMENT_H

#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

/* One sendmsg of len bytes of buf to dst; with seg > 0 the kernel cuts it into
 * datagrams of seg bytes (the last shorter). Returns what sendmsg returns. */
static inline ssize_t swvt_send_segmented(int fd, const struct sockaddr_in *dst, const void *buf,
					  size_t len, uint16_t seg)
{
	struct iovec iov = {(void *)buf, len};
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = {
	    .msg_name = (void *)dst, .msg_namelen = sizeof(*dst), .msg_iov = &iov, .msg_iovlen = 1};
	if (seg) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_UDP;
		cm->cmsg_type = UDP_SEGMENT;
		cm->cmsg_len = CMSG_LEN(sizeof(seg));
		memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
	}
	return sendmsg(fd, &m, 0);
}

#endif
