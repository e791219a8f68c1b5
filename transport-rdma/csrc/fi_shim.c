/* See fi_shim.h. */
#include "fi_shim.h"

uint32_t spindle_fi_version_1_17(void) { return FI_VERSION(1, 17); }
struct fi_info *spindle_fi_allocinfo(void) { return fi_allocinfo(); }
int spindle_fi_close(struct fid *fid) { return fi_close(fid); }
int spindle_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return fi_fabric(attr, fabric, context);
}
int spindle_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
                      void *context)
{
	return fi_domain(fabric, info, domain, context);
}
int spindle_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
                        void *context)
{
	return fi_endpoint(domain, info, ep, context);
}
int spindle_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
                       void *context)
{
	return fi_av_open(domain, attr, av, context);
}
int spindle_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
                       void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}
int spindle_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}
int spindle_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int spindle_fi_getname(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	return fi_getname(&ep->fid, addr, addrlen);
}
int spindle_fi_setname(struct fid_ep *ep, void *addr, size_t addrlen)
{
	return fi_setname(&ep->fid, addr, addrlen);
}
int spindle_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
                         uint64_t flags, void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}
int spindle_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
                      uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
                      void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}
int spindle_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags)
{
	return fi_mr_bind(mr, bfid, flags);
}
int spindle_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }
void *spindle_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t spindle_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
ssize_t spindle_fi_cq_readfrom(struct fid_cq *cq, void *buf, size_t count, fi_addr_t *src_addr)
{
	return fi_cq_readfrom(cq, buf, count, src_addr);
}
ssize_t spindle_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}
const char *spindle_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data,
                                   char *buf, size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
ssize_t spindle_fi_writemsg(struct fid_ep *ep, const struct fi_msg_rma *msg, uint64_t flags)
{
	return fi_writemsg(ep, msg, flags);
}
ssize_t spindle_fi_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	return fi_sendmsg(ep, msg, flags);
}
ssize_t spindle_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr,
                        void *context)
{
	return fi_recv(ep, buf, len, desc, src_addr, context);
}
