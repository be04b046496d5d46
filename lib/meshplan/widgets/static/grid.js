/*
 * The renderer of kind "grid" (meshplan.course.grid.DeviceGrid): one button per GPU, grouped by node; clicking a
 * GPU colours its TP, CP, PP and DP groups from the strides the library computed (Mesh.strides): the same
 * arithmetic as grid.group_from_strides and Mesh.group, coordinate = floor(rank / stride) mod size,
 * base = rank - coordinate * stride, members = base + i * stride. An invalid mesh is flagged with the library's
 * message and the last drawing stays, dimmed. The GPUs are one Tab stop (a roving tabindex): the arrow keys move to
 * the next GPU (left, right) or the same position in the next node (up, down), Home and End to the first and last,
 * and the GPU moved to is the one selected.
 * Comments before the code (these) are not written into the pages.
 */
(function(MP){if(!MP||MP.kinds["grid"])return;MP.kinds["grid"]=function(root,data,ui){
  var AX=["tp","cp","pp","dp"],box=root.querySelector(".mp-grid-nodes"),status=root.querySelector(".mp-status"),
      legend=root.querySelector(".mp-grid-legend"),summary=root.querySelector(".mp-grid-summary"),
      sel=root.querySelector(".mp-grid-selected"),rank=data.rank,cells=[];
  function group(r,size,stride){var c=Math.floor(r/stride)%size,b=r-c*stride,o=[];for(var i=0;i<size;i++)o.push(b+i*stride);return o;}
  function members(g){return g.length<=16?g.join(", "):g.slice(0,16).join(", ")+", \u2026 ("+g.length+" GPUs)";}
  function stale(on){[box,legend,summary,sel].forEach(function(el){el.classList.toggle("mp-stale",on);});}
  function update(){var e=data.table[ui.key()];
    if(e.error){status.textContent="Not a valid mesh: "+e.error;status.className="mp-status mp-invalid";stale(true);return;}
    status.textContent="";status.className="mp-status";stale(false);summary.textContent=e.summary||"";draw(e);}
  box.setAttribute("role","group");
  box.setAttribute("aria-label","GPUs: arrow keys move and select, Home and End go to the first and last");
  box.addEventListener("keydown",function(ev){var e=data.table[ui.key()];if(e.error||!cells.length)return;
    var n=cells.length,g=e.gpn,to={ArrowRight:rank+1,ArrowLeft:rank-1,ArrowDown:rank+g,ArrowUp:rank-g,Home:0,End:n-1}[ev.key];
    if(to===undefined)return;ev.preventDefault();rank=Math.max(0,Math.min(n-1,to));paint(e);cells[rank].focus();});
  function draw(e){box.textContent="";cells=[];var n=data.gpus,g=e.gpn,cs=n<=64?32:(n<=256?26:10),fs=n<=64?12:11;
    for(var s=0;s<n;s+=g){var nd=document.createElement("div");nd.className="mp-node";
      for(var r=s;r<Math.min(s+g,n);r++){var c=document.createElement("button");c.type="button";c.className="mp-gpu";
        c.setAttribute("data-rank",r);c.title="GPU "+r+", node "+Math.floor(r/g);c.textContent=n<=256?r:"";
        c.style.width=c.style.height=c.style.lineHeight=cs+"px";c.style.fontSize=fs+"px";
        c.addEventListener("click",function(ev){rank=+ev.currentTarget.getAttribute("data-rank");paint(data.table[ui.key()]);});
        nd.appendChild(c);cells.push(c);}
      box.appendChild(nd);}
    if(rank>=n)rank=0;paint(e);}
  function paint(e){if(e.error)return;
    cells.forEach(function(c){c.style.background="";c.style.color="";c.removeAttribute("data-group");c.removeAttribute("data-selected");
      c.tabIndex=-1;c.setAttribute("aria-pressed","false");});
    AX.forEach(function(a){var gr=group(rank,e.sizes[a],e.strides[a]);
      gr.forEach(function(r){if(r!==rank){var c=cells[r];c.style.background=data.colours[a];c.style.color=data.textColours[a];c.setAttribute("data-group",a);}});
      var row=root.querySelector('.mp-legend-row[data-axis="'+a+'"]');
      row.querySelector(".mp-size").textContent="size "+e.sizes[a];
      row.querySelector(".mp-link").textContent=e.links[a]?data.linkNames[e.links[a]]:"no traffic";
      row.querySelector(".mp-members").textContent=members(gr);});
    cells[rank].setAttribute("data-selected","1");cells[rank].tabIndex=0;cells[rank].setAttribute("aria-pressed","true");
    sel.textContent="GPU "+rank+" on node "+Math.floor(rank/e.gpn);}
  ui.onChange(update);update();
};})(window.__meshplan);
